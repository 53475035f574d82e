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

// ReloadWait bounds how long a request waits for the map to name a new master (moved).
const ReloadWait = reloadWait

// ReloadEvery is the least time between two asks for a reload of a Cluster client's topology.
const ReloadEvery = reloadEvery
