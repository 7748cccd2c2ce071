package server

import "github.com/raftgate/raftgate/callback"

// callbackAllowList is the parsed --callback-allow of a validated cfg
// (Validate refuses a list that does not parse).
func callbackAllowList(cfg Config) callback.Allow {
	allow, _ := callback.ParseAllow(cfg.CallbackAllow)
	return allow
}
