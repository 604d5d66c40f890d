package dcgmbridge

// Fields read only by the diagnosis signals.
const (
	fieldSMClock  = 100
	fieldGPUTemp  = 150
	fieldPower    = 155
	fieldXIDError = 230
)

// diagnosisSignals are the canonical series the diagnosis rule pack reads
// besides the core model (package diagnose, docs/diagnosis.md): the
// physical state of a GPU (power, temperature, clock, XID) and the network's
// retransmits. They come after the core series, which never read them.
func diagnosisSignals() []CanonicalMetric {
	return []CanonicalMetric{
		{
			Name: "strata:gpu_power_watts", Help: "Board power draw of the GPU.",
			Unit: "watts", Cause: CauseCompute, Felt: FeltThroughput, Level: LevelGPU,
			Terms: []Term{{Source: SourceDCGM, Kind: TermGauge, FieldIDs: []int{fieldPower}, Agg: "avg", Versions: "default CSV", Unit: "watts"}},
		},
		{
			Name: "strata:gpu_temperature_celsius", Help: "GPU temperature; above about 85 C the driver lowers the clocks.",
			Unit: "celsius", Cause: CauseCompute, Felt: FeltThroughput, Level: LevelGPU,
			Terms: []Term{{Source: SourceDCGM, Kind: TermGauge, FieldIDs: []int{fieldGPUTemp}, Agg: "max", Versions: "default CSV", Unit: "celsius"}},
		},
		{
			Name: "strata:gpu_sm_clock_mhz", Help: "SM clock of the GPU; the diagnosis pack compares it with its recent maximum (a power cap or thermal throttling lowers it).",
			Unit: "MHz", Cause: CauseCompute, Felt: FeltThroughput, Level: LevelGPU,
			Terms: []Term{{Source: SourceDCGM, Kind: TermGauge, FieldIDs: []int{fieldSMClock}, Agg: "avg", Versions: "default CSV", Unit: "MHz"}},
		},
		{
			Name: "strata:gpu_xid:last", Help: "The last XID error of the GPU (0: none); XID 79 means the GPU fell off the bus.",
			Unit: "xid_code", Cause: CauseCompute, Felt: FeltQuality, Level: LevelGPU,
			Terms: []Term{{Source: SourceDCGM, Kind: TermGauge, FieldIDs: []int{fieldXIDError}, Agg: "max", Versions: "default CSV", Unit: "xid_code", Note: "a gauge holding the last XID, not a counter"}},
		},
		{
			Name: "strata:tcp_retransmits:rate", Help: "TCP retransmitted packets per second of the host, from eBPF.",
			Unit: "per_second", Cause: CauseNetwork, Felt: FeltThroughput, Level: LevelHost,
			Terms: []Term{
				{Source: SourceEBPF, Kind: TermRate, Metric: "ebpf_exporter_tcp_retransmit_ipv4_packets_total", Versions: "examples/tcp-retransmit.yaml", Unit: "packets"},
				{Source: SourceEBPF, Kind: TermRate, Metric: "ebpf_exporter_tcp_retransmit_ipv6_packets_total", Versions: "examples/tcp-retransmit.yaml", Unit: "packets"},
			},
		},
	}
}
