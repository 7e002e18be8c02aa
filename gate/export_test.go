package gate

// Idle reports whether no store call of the gate is in flight or has an
// answer still to record: no batch, no admission's own call. Tests wait
// for it instead of for a while.
func (g *Gate) Idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.batching {
		return false
	}
	for _, e := range g.cache {
		if e.call != nil {
			return false
		}
	}
	return true
}
