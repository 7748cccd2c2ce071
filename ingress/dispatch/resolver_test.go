package dispatch

import "github.com/raftgate/raftgate/leadership"

// The binary passes its *leadership.Membership as the Resolver.
var _ Resolver = (*leadership.Membership)(nil)
