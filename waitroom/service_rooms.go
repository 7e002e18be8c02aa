package waitroom

import "slices"

// Rooms returns, sorted, the rooms this service runs admitters for: every
// room configured in the store as of the last room refresh (see
// ServiceConfig.RoomRefresh). It is empty until Run has made its first
// refresh.
func (s *Service) Rooms() []string {
	s.mu.Lock()
	rooms := make([]string, 0, len(s.admitters))
	for room := range s.admitters {
		rooms = append(rooms, room)
	}
	s.mu.Unlock()
	slices.Sort(rooms)
	return rooms
}
