package redisstore

// DieAfterAdmit makes every sharded admission pass of s end right after
// its admit step, as an instance that crashed there would.
func DieAfterAdmit(s *Store, die bool) { s.dieAfterAdmit = die }
