package processor

// ArgNames returns the order the Go side writes the scripts' arguments in.
func ArgNames() []string {
	if len(argNames) != len(args{}.all()) {
		return nil
	}
	return argNames
}

// MaxListed is how many waiting processes Inspect lists at most.
const MaxListed = maxListed
