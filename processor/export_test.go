package processor

// ArgNames returns the order the Go side writes the scripts' arguments in.
func ArgNames() []string {
	if len(argNames) != len(args{}.list()) {
		return nil
	}
	return argNames
}
