// Package rwclient is Strata's one remote-write sender: it posts an encoded,
// snappy-compressed remote-write body (RW 1.0 or 2.0, by the headers it is
// configured with) and retries it as Prometheus' queue manager does: 429, 5xx
// and transport errors after a backoff that starts at MinBackoff, doubles up
// to MaxBackoff and gives way to the reply's Retry-After; any other 4xx is a
// refusal, never retried. Callers keep their own metrics through the observe
// callback of Send, called once per HTTP attempt.
//
// Data flow: sim (Cluster.PushWith) and bench (RunLoad) -> rwclient -> a
// remote-write receiver (remotewrite, or any other).
package rwclient
