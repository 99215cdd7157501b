package ring

// PretendOwner makes the sweep take uid for the daemon's user until the
// returned function restores it.
func PretendOwner(uid uint32) (restore func()) {
	old := owner
	owner = func() uint32 { return uid }
	return func() { owner = old }
}
