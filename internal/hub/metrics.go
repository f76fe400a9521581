package hub

import "github.com/prometheus/client_golang/prometheus"

// metrics are the hub's Prometheus metrics, registered on the Registerer in
// its Config, never the global one.
type metrics struct {
	connected    prometheus.Gauge
	connects     *prometheus.CounterVec
	takeovers    prometheus.Counter
	caChanges    prometheus.Counter
	heartbeatRTT prometheus.Histogram

	toCluster, fromCluster prometheus.Counter

	// streamsOpened and streamsClosed count the streams to API servers the
	// hub opened and closed: equal once the hub is idle, or a stream leaked.
	streamsOpened, streamsClosed prometheus.Counter
	// streamsRefused counts people's requests refused at a cluster's
	// MaxStreamsPerAgent.
	streamsRefused *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tether_agents_connected", Help: "Agents connected now.",
		}),
		connects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_agent_connects_total", Help: "Agent connection attempts, by result.",
		}, []string{"result"}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_agent_takeovers_total", Help: "Agents replaced by a newer agent with the same name and token. A rising count means two live agents share a token.",
		}),
		caChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_agent_ca_changes_total", Help: "Agents that sent a cluster CA other than the one they sent last time.",
		}),
		heartbeatRTT: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tether_heartbeat_rtt_seconds", Help: "Round-trip time of the hub's heartbeats to agents.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	relayed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_relayed_bytes_total", Help: "Bytes relayed through agents' tunnels to and from API servers (TLS included).",
	}, []string{"direction"})
	m.toCluster, m.fromCluster = relayed.WithLabelValues("to_cluster"), relayed.WithLabelValues("from_cluster")
	m.streamsOpened = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tether_streams_opened_total", Help: "Streams to API servers the hub opened through agents' tunnels.",
	})
	m.streamsClosed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tether_streams_closed_total", Help: "Streams to API servers the hub closed; equals tether_streams_opened_total when none are open.",
	})
	m.streamsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_streams_refused_total", Help: "People's requests to a cluster answered 429 because the streams open through its agent were at TETHER_MAX_STREAMS_PER_AGENT.",
	}, []string{"cluster"})
	for _, c := range []prometheus.Collector{m.connected, m.connects, m.takeovers, m.caChanges, m.heartbeatRTT, relayed, m.streamsOpened, m.streamsClosed, m.streamsRefused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// forgetCluster drops the series of a cluster the agents list no longer
// names (kubeproxy forgets its own).
func (m *metrics) forgetCluster(name string) {
	m.streamsRefused.DeleteLabelValues(name)
}

// clusterReadyDesc is tether_cluster_ready, one series per cluster, read
// from the clusters' statuses when scraped: a cluster gone from the agents
// list is gone from it too, and nothing is kept in step.
var clusterReadyDesc = prometheus.NewDesc("tether_cluster_ready",
	"1 for a cluster whose API server answers the hub's probe through its tunnel (Ready), 0 for one that is Unreachable; one series per cluster in the agents list.",
	[]string{"cluster"}, nil)

// clusterReadiness collects tether_cluster_ready, so operators can alert on
// a cluster that is Unreachable.
type clusterReadiness struct{ h *Hub }

func (c clusterReadiness) Describe(ch chan<- *prometheus.Desc) { ch <- clusterReadyDesc }

func (c clusterReadiness) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.h.Clusters() {
		ready := 0.0
		if st.Status == Ready {
			ready = 1
		}
		ch <- prometheus.MustNewConstMetric(clusterReadyDesc, prometheus.GaugeValue, ready, st.Name)
	}
}
