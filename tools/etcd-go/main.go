// etcd-go: etcd's own Go client (go.etcd.io/etcd/client/v3) against any etcd v3
// endpoint, Partita's gateway or etcd itself. Two modes:
//
//	etcd-go history -endpoints A,B -clients N -seconds S -keys K
//	    N clients, each with a client of its own on one endpoint (round robin), run
//	    random puts, gets, deletes and transactions on keys k0..k(K-1) for S seconds
//	    and print one JSON line per operation: the client, the operation, when it was
//	    called and when it returned (ns since the start), and the response exactly as
//	    the Go client returned it (encoding/json of the response), or the error. The
//	    test that drives it (tests/etcd_go.rs) turns the lines into a key-value history
//	    for Partita's checker.
//
//	etcd-go range -endpoints A -prefix P [-max-create-rev N] [-min-mod-rev N] [-last-create]
//	    one Get of the keys under P with etcd's revision filters (with -last-create,
//	    the newest created key only: what concurrency.Mutex waits on) and print the
//	    keys, one per line, then "count N more B".
//
//	etcd-go locks|elect|stm ...
//	    etcd's concurrency package unchanged: mutexes guarding a counter (one JSON
//	    line per critical section), an election's campaign, proclaim, observe and
//	    resign, and STM transfers (see concurrency.go).
//
//	etcd-go bench -endpoints A,B,C -clients N -conns C -seconds S -warmup W -keys K -value-size V [-op put|get]
//	    N clients over C gRPC connections put random keys (etcd's own benchmark tool's
//	    "put" does the same), or with -op get read them with linearizable gets (its
//	    "range" without --consistency=s; every key is put once before the clock
//	    starts), for S seconds after W seconds of warm-up, and print one JSON object:
//	    operations ("puts"), throughput, latency percentiles in ms, errors.
//
//	etcd-go ycsb -endpoints A,B,C -workload a..f -clients N -conns C -seconds S ...
//	    YCSB's core workloads A-F (see ycsb.go).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: etcd-go history|bench|range|locks|elect|stm [flags] (etcd-go MODE -h for the flags)")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "history":
		history(os.Args[2:])
	case "bench":
		bench(os.Args[2:])
	case "ycsb":
		ycsb(os.Args[2:])
	case "range":
		rangeMode(os.Args[2:])
	case "locks":
		locks(os.Args[2:])
	case "elect":
		elect(os.Args[2:])
	case "stm":
		stm(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "etcd-go: unknown mode %q (history, bench, range, locks, elect or stm)\n", os.Args[1])
		os.Exit(2)
	}
}

func connect(endpoints []string) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd-go: connect %v: %v\n", endpoints, err)
		os.Exit(1)
	}
	return c
}

// loadFlags declares the flags every load mode takes: the endpoints, the clients, the
// connections they share, and the measured and warm-up seconds.
func loadFlags(fs *flag.FlagSet, measured string) (eps *string, clients, conns *int, seconds, warmup *float64) {
	eps = fs.String("endpoints", "127.0.0.1:2379", "comma-separated endpoints")
	clients = fs.Int("clients", 1, "concurrent clients")
	conns = fs.Int("conns", 1, "gRPC connections the clients share")
	seconds = fs.Float64("seconds", 10, measured)
	warmup = fs.Float64("warmup", 2, "seconds before measuring")
	return
}

// connectN opens n clients (each its own gRPC connection) on the endpoints, kept
// until the program ends.
func connectN(endpoints []string, n int) []*clientv3.Client {
	cs := make([]*clientv3.Client, n)
	for i := range cs {
		cs[i] = connect(endpoints)
	}
	return cs
}

type line struct {
	Client uint64          `json:"client"`
	Op     string          `json:"op"`
	Key    string          `json:"key"`
	Value  string          `json:"value,omitempty"`
	Call   int64           `json:"call"`
	Ret    int64           `json:"ret"`
	Resp   json.RawMessage `json:"resp,omitempty"`
	Err    string          `json:"err,omitempty"`
}

func history(args []string) {
	fs := flag.NewFlagSet("history", flag.ExitOnError)
	eps := fs.String("endpoints", "127.0.0.1:2379", "comma-separated endpoints")
	clients := fs.Int("clients", 4, "concurrent clients")
	seconds := fs.Float64("seconds", 5, "how long")
	keys := fs.Int("keys", 4, "keys k0.. used")
	seed := fs.Int64("seed", 1, "random seed")
	fs.Parse(args)
	endpoints := strings.Split(*eps, ",")
	start := time.Now()
	deadline := start.Add(time.Duration(*seconds * float64(time.Second)))
	var mu sync.Mutex
	out := json.NewEncoder(os.Stdout)
	var wg sync.WaitGroup
	for c := 0; c < *clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			cli := connect([]string{endpoints[c%len(endpoints)]})
			defer cli.Close()
			rng := rand.New(rand.NewSource(*seed*1000 + int64(c)))
			for n := 1; time.Now().Before(deadline); n++ {
				k := fmt.Sprintf("k%d", rng.Intn(*keys))
				v := fmt.Sprintf("c%d-%d", c, n)
				l := line{Client: uint64(c + 1), Key: k}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				l.Call = time.Since(start).Nanoseconds()
				var resp any
				var err error
				switch r := rng.Intn(100); {
				case r < 35:
					l.Op, l.Value = "put", v
					resp, err = cli.Put(ctx, k, v)
				case r < 65:
					l.Op = "get"
					resp, err = cli.Get(ctx, k)
				case r < 75:
					l.Op = "del"
					resp, err = cli.Delete(ctx, k)
				default:
					// The same transaction as tests/etcd.rs's etcdctl one.
					l.Op, l.Value = "txn", v
					resp, err = cli.Txn(ctx).
						If(clientv3.Compare(clientv3.Version(k), ">", 0)).
						Then(clientv3.OpPut(k, v)).
						Else(clientv3.OpGet(k)).
						Commit()
				}
				l.Ret = time.Since(start).Nanoseconds()
				cancel()
				if err != nil {
					l.Err = err.Error()
				} else if b, e := json.Marshal(resp); e == nil {
					l.Resp = b
				} else {
					l.Err = "encoding the response: " + e.Error()
				}
				mu.Lock()
				out.Encode(l)
				mu.Unlock()
			}
		}(c)
	}
	wg.Wait()
}

type result struct {
	Endpoints  []string `json:"endpoints"`
	Clients    int      `json:"clients"`
	Conns      int      `json:"conns"`
	Seconds    float64  `json:"seconds"`
	Keys       int      `json:"keys"`
	ValueSize  int      `json:"value_size"`
	Puts       int      `json:"puts"`
	Errors     int64    `json:"errors"`
	Throughput float64  `json:"puts_per_s"`
	MeanMs     float64  `json:"mean_ms"`
	P50Ms      float64  `json:"p50_ms"`
	P90Ms      float64  `json:"p90_ms"`
	P99Ms      float64  `json:"p99_ms"`
	MaxMs      float64  `json:"max_ms"`
	FirstError string   `json:"first_error,omitempty"`
	// With -cpu-pids: CPU microseconds per operation over the measured seconds, of
	// the system's processes and of this client.
	ServerCPU *float64 `json:"server_cpu_us_per_op,omitempty"`
	ClientCPU *float64 `json:"client_cpu_us_per_op,omitempty"`
}

// cpuSeconds: the CPU time (user and system) the processes pids (comma-separated)
// have used so far, and this process's own.
func cpuSeconds(pids string) [2]float64 {
	var out [2]float64
	for _, p := range strings.Split(pids, ",") {
		b, err := os.ReadFile("/proc/" + strings.TrimSpace(p) + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name, which ends with the last ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 12 {
			var u, s float64
			fmt.Sscan(f[11], &u)
			fmt.Sscan(f[12], &s)
			out[0] += (u + s) / 100 // clock ticks (USER_HZ is 100 on Linux)
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		out[1] = float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
	}
	return out
}

func bench(args []string) {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	eps, clients, conns, seconds, warmup := loadFlags(fs, "measured seconds")
	keys := fs.Int("keys", 100000, "key space")
	valueSize := fs.Int("value-size", 8, "value bytes")
	op := fs.String("op", "put", "put, or get (linearizable)")
	cpuPids := fs.String("cpu-pids", "", "comma-separated pids of the system under test: report their CPU and ours per operation over the measured seconds")
	fs.Parse(args)
	if *clients < 1 || *conns < 1 || *seconds <= 0 || *keys < 1 || *valueSize < 0 {
		fmt.Fprintln(os.Stderr, "etcd-go bench: clients, conns, seconds and keys must be positive")
		os.Exit(2)
	}
	if *op != "put" && *op != "get" {
		fmt.Fprintf(os.Stderr, "etcd-go bench: -op %q: put or get\n", *op)
		os.Exit(2)
	}
	endpoints := strings.Split(*eps, ",")
	cs := connectN(endpoints, *conns)
	value := strings.Repeat("v", *valueSize)
	if *op == "get" {
		preload(cs, *keys, func(i int) (string, string) { return fmt.Sprintf("key%08d", i), value })
	}
	var cpu0, cpu1 [2]float64
	var cpuDone sync.WaitGroup
	run := runLoad(cs, *clients, *warmup, *seconds, func(c int) int64 { return int64(c) + 1 },
		func(measureFrom, end time.Time) {
			if *cpuPids == "" {
				return
			}
			cpuDone.Add(1)
			go func() {
				defer cpuDone.Done()
				time.Sleep(time.Until(measureFrom))
				cpu0 = cpuSeconds(*cpuPids)
				time.Sleep(time.Until(end))
				cpu1 = cpuSeconds(*cpuPids)
			}()
		},
		func(_ int, rng *rand.Rand, cli *clientv3.Client, ctx context.Context) (string, error) {
			k := fmt.Sprintf("key%08d", rng.Intn(*keys))
			var err error
			if *op == "put" {
				_, err = cli.Put(ctx, k, value)
			} else {
				_, err = cli.Get(ctx, k)
			}
			return *op, err
		})
	cpuDone.Wait()
	lat := make([][]time.Duration, *clients)
	for c := range lat {
		lat[c] = run.lat[c][*op]
	}
	r := result{Endpoints: endpoints, Clients: *clients, Conns: *conns, Seconds: *seconds, Keys: *keys,
		ValueSize: *valueSize, Errors: run.errors, FirstError: run.firstError}
	r.summarize(lat, *seconds)
	if *cpuPids != "" && r.Puts > 0 {
		server := (cpu1[0] - cpu0[0]) * 1e6 / float64(r.Puts)
		client := (cpu1[1] - cpu0[1]) * 1e6 / float64(r.Puts)
		r.ServerCPU, r.ClientCPU = &server, &client
	}
	json.NewEncoder(os.Stdout).Encode(r)
}

// A load run's outcome: each client's latencies per operation name (of operations
// inside the measured window), and the errors.
type loadRun struct {
	lat        []map[string][]time.Duration
	errors     int64
	firstError string
}

// runLoad runs `clients` closed-loop clients over the connections cs for warmup +
// seconds: each calls step (with a random source seeded by seed(client), a
// connection and a 10 s deadline) again and again, and an operation counts when it
// succeeded and both began and ended inside the measured seconds. window is called
// first with the measured window's bounds.
func runLoad(cs []*clientv3.Client, clients int, warmup, seconds float64, seed func(int) int64,
	window func(measureFrom, end time.Time),
	step func(c int, rng *rand.Rand, cli *clientv3.Client, ctx context.Context) (string, error)) loadRun {
	measureFrom := time.Now().Add(time.Duration(warmup * float64(time.Second)))
	end := measureFrom.Add(time.Duration(seconds * float64(time.Second)))
	window(measureFrom, end)
	var errors atomic.Int64
	var firstErr atomic.Value
	lat := make([]map[string][]time.Duration, clients)
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		lat[c] = map[string][]time.Duration{}
		go func(c int) {
			defer wg.Done()
			cli := cs[c%len(cs)]
			rng := rand.New(rand.NewSource(seed(c)))
			for {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				op, err := step(c, rng, cli, ctx)
				cancel()
				t1 := time.Now()
				if err != nil {
					errors.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				if !t0.Before(measureFrom) && !t1.After(end) {
					lat[c][op] = append(lat[c][op], t1.Sub(t0))
				}
			}
		}(c)
	}
	wg.Wait()
	r := loadRun{lat: lat, errors: errors.Load()}
	if e, ok := firstErr.Load().(string); ok {
		r.firstError = e
	}
	return r
}

// summarize fills the count, throughput and latency fields from every client's
// latencies.
func (r *result) summarize(lat [][]time.Duration, seconds float64) {
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		i := int(p * float64(len(all)-1))
		return ms(all[i])
	}
	var sum time.Duration
	for _, d := range all {
		sum += d
	}
	r.Puts = len(all)
	r.Throughput = float64(len(all)) / seconds
	r.P50Ms, r.P90Ms, r.P99Ms = pct(0.5), pct(0.9), pct(0.99)
	if len(all) > 0 {
		r.MeanMs = ms(sum) / float64(len(all))
		r.MaxMs = ms(all[len(all)-1])
	}
}

// preload puts keys 0..n-1 (key and value of each from kv) over the clients, 64 at a
// time, before a measurement starts; any failure ends the program.
func preload(cs []*clientv3.Client, n int, kv func(int) (string, string)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			cli := cs[g%len(cs)]
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				k, v := kv(i)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := cli.Put(ctx, k, v)
				cancel()
				if err != nil {
					fmt.Fprintf(os.Stderr, "etcd-go: preload put %s: %v\n", k, err)
					os.Exit(1)
				}
			}
		}(g)
	}
	wg.Wait()
}

func rangeMode(args []string) {
	fs := flag.NewFlagSet("range", flag.ExitOnError)
	endpoints := fs.String("endpoints", "127.0.0.1:2379", "comma-separated endpoints")
	prefix := fs.String("prefix", "", "the keys' prefix")
	maxCreate := fs.Int64("max-create-rev", 0, "only keys created at or before this revision")
	minMod := fs.Int64("min-mod-rev", 0, "only keys modified at or after this revision")
	lastCreate := fs.Bool("last-create", false, "the newest created key only")
	fs.Parse(args)
	c := connect(strings.Split(*endpoints, ","))
	defer c.Close()
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if *maxCreate != 0 {
		opts = append(opts, clientv3.WithMaxCreateRev(*maxCreate))
	}
	if *minMod != 0 {
		opts = append(opts, clientv3.WithMinModRev(*minMod))
	}
	if *lastCreate {
		opts = append(opts, clientv3.WithLastCreate()...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Get(ctx, *prefix, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd-go: get: %v\n", err)
		os.Exit(1)
	}
	for _, kv := range r.Kvs {
		fmt.Println(string(kv.Key))
	}
	fmt.Printf("count %d more %v\n", r.Count, r.More)
}
