// Package schedule is the pure logic of recurring invocations: parsing a
// spec (an interval, an ISO 8601 repeating interval, or a cron expression
// in a time zone, each optionally bounded by a start and an end), the
// next tick after a time, the ticks of a range (a backfill), what a leader does with ticks it finds overdue (the
// catch-up window), what a tick does while the previous run is still
// under way (the overlap policy), and each tick's jitter.
//
// It reads no clock and keeps no state: callers pass the time in. The
// partition state machine applies its overlap decisions inside Apply
// (they read only replicated state); next-tick and catch-up computations
// depend on the time zone database of the machine, so the leader makes
// them and stamps their outcome into the log command, and Apply never
// calls them.
//
// Ticks of an interval are aligned to the Unix epoch (every 5m ticks at
// :00, :05, ...), so they do not depend on when a schedule was created or
// updated. A repeating interval is R/DURATION (the same, DURATION an ISO
// 8601 duration of fixed-length units, read by github.com/sosodev/duration)
// or R[n]/START/DURATION (ticks at START + k*DURATION, n of them when n is
// given); the other ISO forms are refused. Start and end are inclusive. Cron expressions have five fields (minute, hour, day of month,
// month, day of week) or a descriptor (@daily, @hourly, ...), parsed by
// github.com/robfig/cron/v3 and evaluated in the schedule's time zone
// (UTC when unset). Across a daylight-saving change a local time that does
// not exist (02:30 on the spring-forward night in Europe/Paris) is not
// fired that day, and one that exists twice (02:30 on the fall-back night)
// fires once.
package schedule
