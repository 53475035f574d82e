package redistest

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The README's "Least privilege" says what the lists of acl.go hold: its ACL SETUSER line is
// ACLRules of ACLCommands, and every other command its prose names is of ACLFamilyCommands,
// ACLClusterCommands or the optional rules it explains — and each of those lists' commands is
// named there.
func TestACLListsAreTheREADMEs(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n## Least privilege\n")
	if start < 0 {
		t.Fatal(`README has no "## Least privilege"`)
	}
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}

	const head = "ACL SETUSER dlock "
	i := strings.Index(section, head)
	j := strings.Index(section[max(i, 0):], "```")
	if i < 0 || j < 0 {
		t.Fatalf("no %q block in README's Least privilege", head)
	}
	got := strings.Fields(section[i+len(head) : i+j])
	if want := ACLRules("PASSWORD", ACLCommands)[1:]; !slices.Equal(got, want) { // [1:]: not "reset"
		t.Errorf("README's rules\n %v\nare not ACLRules(ACLCommands)\n %v", got, want)
	}

	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`\+([a-z|]+)`).FindAllStringSubmatch(section, -1) {
		named[m[1]] = true
	}
	optional := []string{"wait", "client|setinfo", "command|info", "info"} // explained in the prose
	for c := range named {
		if !slices.Contains(ACLCommands, c) && !slices.Contains(ACLFamilyCommands, c) &&
			!slices.Contains(ACLClusterCommands, c) && !slices.Contains(optional, c) {
			t.Errorf("README names +%s, which no list of acl.go holds", c)
		}
	}
	for _, c := range slices.Concat(ACLFamilyCommands, ACLClusterCommands, optional) {
		if !named[c] {
			t.Errorf("README's Least privilege does not name +%s", c)
		}
	}
}
