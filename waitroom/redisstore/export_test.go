package redisstore

// DieAfterAdmit makes every sharded admission pass of s end right after
// its admit step, as an instance that crashed there would.
func DieAfterAdmit(s *Store, die bool) { s.dieAfterAdmit = die }

// Inflight returns s's auto-pipelined scripts in flight, their limit and
// how many it refused.
func Inflight(s *Store) (n, limit int, refused int64) {
	n, limit, refused, _ = s.Load()
	return n, limit, refused
}
