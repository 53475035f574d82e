package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// versionCommand is "dlock version".
func versionCommand() *command {
	return &command{
		name:    "version",
		summary: "print dlock's version, and the Go toolchain it was built with",
		usage: `
usage: dlock version

version prints one line: dlock's module version (for a build from a checkout, "(devel)" or
a pseudo-version naming the commit, with the commit when the build recorded one), the library's
when it is another module's, and the Go toolchain it was built with. It talks to no Redis.
`,
		define: func(fs *flagSet) runner {
			return func(out cli, args []string) error {
				if _, _, err := fs.parse(args, 0, false); err != nil {
					return err
				}
				info, _ := debug.ReadBuildInfo()
				if _, err := io.WriteString(out.stdout, versionLine(info)); err != nil {
					return unwritten(err)
				}
				return nil
			}
		},
	}
}

// libraryPath is the module of the library dlock is built on.
const libraryPath = "github.com/dlockgo/dlock"

// versionLine is version's line for a binary built as info says (nil when the binary has no
// build information).
func versionLine(info *debug.BuildInfo) string {
	if info == nil {
		return "dlock (unknown version: built without module information)\n"
	}
	line := "dlock " + info.Main.Version
	if info.Main.Version == "" {
		line += "(unknown)"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev = rev[:min(len(rev), 12)]; rev != "" && !strings.Contains(info.Main.Version, rev) { // (a pseudo-version stamped from the checkout names it already)
		line += " " + rev
		if modified == "true" {
			line += "+modified"
		}
	}
	if info.Main.Path != libraryPath {
		for _, d := range info.Deps {
			if d.Path == libraryPath {
				line += ", library " + d.Version
			}
		}
	}
	return fmt.Sprintf("%s (%s)\n", line, info.GoVersion)
}
