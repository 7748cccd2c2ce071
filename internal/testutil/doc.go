// Package testutil holds the helpers the tests of every raftgate package
// share: WaitFor polls a condition with a deadline (never a sleep as
// synchronisation), LockedBuffer collects output written by another
// goroutine or process, and Request/Do send one HTTP request and read the
// whole answer; RoundTrip and Seeds make the fuzz targets of protobuf
// messages. Only tests import it.
package testutil
