package natskeyed

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamConfig returns the configuration of a stream that captures
// <subject>.<id> and stores it as <subject>.<p>.<id>, where p is
// partition(partitions, id): FNV-1a of the id modulo partitions, computed
// by the server (a subject transform, NATS 2.10+). Subjects already of the
// form <subject>.<p>.<id> are stored as they are, so a publisher on an older
// server can partition on its side with PartitionOf.
func StreamConfig(name, subject string, partitions int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:     name,
		Subjects: []string{subject + ".>"},
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source:      subject + ".*",
			Destination: fmt.Sprintf("%s.{{partition(%d,1)}}.{{wildcard(1)}}", subject, partitions),
		},
	}
}

// PartitionOf is the partition the stream's transform gives to id: 32-bit
// FNV-1a of id modulo n, as nats-server computes partition(n, ...).
func PartitionOf(id string, n int) int {
	const (
		offset32 = 2166136261
		prime32  = 16777619
	)
	h := uint32(offset32)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= prime32
	}
	return int(h % uint32(n))
}

// PartitionedSubject is the stored subject of id: <subject>.<p>.<id>.
func PartitionedSubject(subject, id string, n int) string {
	return subject + "." + strconv.Itoa(PartitionOf(id, n)) + "." + id
}

// serverAtLeast reports whether a server version string such as "2.11.3"
// is at least major.minor.
func serverAtLeast(version string, major, minor int) bool {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// PinningSupported reports whether a server of the given version offers
// pinned-client priority groups (NATS 2.11+).
func PinningSupported(serverVersion string) bool { return serverAtLeast(serverVersion, 2, 11) }

// TransformSupported reports whether a server of the given version applies
// stream subject transforms (NATS 2.10+).
func TransformSupported(serverVersion string) bool { return serverAtLeast(serverVersion, 2, 10) }
