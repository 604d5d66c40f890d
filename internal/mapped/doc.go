// Package mapped drops a process's page-table mappings of read-only file
// mappings under a directory, so pages it read once through mmap stop
// counting in its resident set while the kernel keeps them in its page
// cache.
//
// The raw tier's head keeps every cut chunk in memory-mapped files
// (chunks_head/) and reads them back through the mapping. Each page a read
// touches (and the pages the kernel maps around it) then stays mapped into
// the process until the file is unmapped at the head's truncation, hours
// later: with the canonical recording rules reading the last two minutes
// of every series they use every 15 s, Strata's resident set grew with
// every chunk written (65 MiB after ten minutes of 50,000 series at one
// sample per second, about 6.5 MiB a minute), although no byte of it was
// needed once read. Prometheus only shows this when something queries it.
//
// MADV_DONTNEED on a shared read-only file mapping only removes the page
// table entries: the data stays in the page cache and the next read maps it
// again with a minor fault. The caller must make sure the mappings are not
// unmapped while Release runs (an address range unmapped and reused for
// anonymous memory in between would lose its contents).
//
// Trigger, polled with SharedResident, says when a release is due: after
// the reads have mapped a given amount since the last one, so that a burst
// of reads (every series' chunk cut at once at the TSDB's block boundary,
// then read back) stays mapped for a poll interval, not a whole period.
package mapped
