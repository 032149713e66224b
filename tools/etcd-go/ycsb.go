// YCSB's core workloads through etcd's Go client, for comparing etcd and Partita's
// gateway side by side (go-ycsb's etcd binding does the same operations; this keeps
// both systems on the one client the other benchmarks use).
//
//	etcd-go ycsb -endpoints A,B,C -workloads abcfde -clients N -conns C -seconds S -warmup W
//	             [-records R] [-fields F] [-field-length L]
//
// First the load phase: R records are inserted (untimed). Then each workload runs in
// the order YCSB's documentation gives (A, B, C, F, D, then E) for W + S seconds on
// the same data, and prints one JSON line: its operations per second over the S
// measured seconds and, per operation, the count and latency percentiles in ms.
//
// As YCSB's CoreWorkload defines them (workloads/workload[a-f]):
//
//	A: 50% read, 50% update, zipfian        D: 95% read, 5% insert, latest
//	B: 95% read, 5% update, zipfian         E: 95% scan (1-100 records), 5% insert, zipfian
//	C: 100% read, zipfian                   F: 50% read, 50% read-modify-write, zipfian
//
// A record is F fields of L bytes (YCSB's defaults: 10 of 100) stored as one value; a
// key is "user" and the FNV-1a hash of the record number (YCSB's hashed insert order).
// Because a record is one value, an update writes every field (YCSB's default updates
// one field, which a key-value binding can only do by writing the record). A read is
// a linearizable Get; a scan a Get from the start key with a limit; a
// read-modify-write a Get, then a Put of the record. The zipfian choice is YCSB's
// scrambled zipfian (constant 0.99); "latest" is YCSB's skewed-latest (the newest
// records most often).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

const zipfianConstant = 0.99

// zipfian is YCSB's ZipfianGenerator over [0, items) (Gray et al., "Quickly generating
// billion-record synthetic databases"), for a fixed item count.
type zipfian struct {
	items                    float64
	theta, alpha, zetan, eta float64
	halfPowTheta, zeta2theta float64
}

func zeta(n int64, theta float64) float64 {
	s := 0.0
	for i := int64(1); i <= n; i++ {
		s += 1 / math.Pow(float64(i), theta)
	}
	return s
}

func newZipfian(items int64, zetan float64) *zipfian {
	theta := zipfianConstant
	z := &zipfian{items: float64(items), theta: theta, alpha: 1 / (1 - theta), zetan: zetan,
		zeta2theta: zeta(2, theta), halfPowTheta: 1 + math.Pow(0.5, theta)}
	z.eta = (1 - math.Pow(2/z.items, 1-theta)) / (1 - z.zeta2theta/zetan)
	return z
}

func (z *zipfian) next(rng *rand.Rand) int64 {
	u := rng.Float64()
	uz := u * z.zetan
	if uz < 1 {
		return 0
	}
	if uz < z.halfPowTheta {
		return 1
	}
	return int64(z.items * math.Pow(z.eta*u-z.eta+1, z.alpha))
}

// YCSB's ScrambledZipfianGenerator: a zipfian over ten billion items, hashed onto the
// key space, so the popular records are spread over it.
const scrambledItems = 10000000000
const scrambledZetan = 26.46902820178302

func fnv64(v int64) int64 {
	h := uint64(0xCBF29CE484222325)
	for i := 0; i < 8; i++ {
		h ^= uint64(v & 0xff)
		h *= 1099511628211
		v >>= 8
	}
	if int64(h) < 0 {
		return -int64(h)
	}
	return int64(h)
}

func keyName(n int64) string { return fmt.Sprintf("user%d", fnv64(n)) }

type ycsbWorkload struct {
	name                                     string
	read, update, insert, scan, readModWrite float64
	latest                                   bool
}

// choose: the record a read, update or scan names, of the n inserted so far (never
// one not yet inserted).
func (w ycsbWorkload) choose(rng *rand.Rand, n int64, scrambled, latest *zipfian) int64 {
	if w.latest {
		return max(n-1-latest.next(rng), 0)
	}
	return fnv64(scrambled.next(rng)) % n
}

var ycsbWorkloads = map[byte]ycsbWorkload{
	'a': {name: "A", read: 0.5, update: 0.5},
	'b': {name: "B", read: 0.95, update: 0.05},
	'c': {name: "C", read: 1},
	'd': {name: "D", read: 0.95, insert: 0.05, latest: true},
	'e': {name: "E", scan: 0.95, insert: 0.05},
	'f': {name: "F", read: 0.5, readModWrite: 0.5},
}

type opStats struct {
	Count  int     `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
}

type ycsbResult struct {
	Workload   string             `json:"workload"`
	Clients    int                `json:"clients"`
	Conns      int                `json:"conns"`
	Seconds    float64            `json:"seconds"`
	Records    int64              `json:"records"`
	Throughput float64            `json:"ops_per_s"`
	Ops        map[string]opStats `json:"ops"`
	Errors     int64              `json:"errors"`
	FirstError string             `json:"first_error,omitempty"`
}

func ycsb(args []string) {
	fs := flag.NewFlagSet("ycsb", flag.ExitOnError)
	eps, clients, conns, seconds, warmup := loadFlags(fs, "measured seconds per workload (each after its warm-up)")
	workloads := fs.String("workloads", "abcfde", "the workloads, in order (letters a-f)")
	records := fs.Int64("records", 100000, "records loaded first")
	fields := fs.Int("fields", 10, "fields per record")
	fieldLength := fs.Int("field-length", 100, "bytes per field")
	fs.Parse(args)
	if *clients < 1 || *conns < 1 || *seconds <= 0 || *records < 1 || *fields < 1 || *fieldLength < 1 {
		fmt.Fprintln(os.Stderr, "etcd-go ycsb: clients, conns, seconds, records, fields and field-length must be positive")
		os.Exit(2)
	}
	for i := 0; i < len(*workloads); i++ {
		if _, ok := ycsbWorkloads[(*workloads)[i]]; !ok {
			fmt.Fprintf(os.Stderr, "etcd-go ycsb: no workload %q (a to f)\n", (*workloads)[i])
			os.Exit(2)
		}
	}
	cs := connectN(strings.Split(*eps, ","), *conns)
	record := func(n int64, version int) string {
		var b strings.Builder
		for f := 0; f < *fields; f++ {
			fmt.Fprintf(&b, "field%d=", f)
			b.WriteString(strings.Repeat(string(rune('a'+(int(n)+f+version)%26)), *fieldLength))
		}
		return b.String()
	}
	preload(cs, int(*records), func(i int) (string, string) { return keyName(int64(i)), record(int64(i), 0) })
	// Records inserted so far: the load's, then each workload's inserts.
	var inserted atomic.Int64
	inserted.Store(*records)
	scrambled := newZipfian(scrambledItems, scrambledZetan)
	latest := newZipfian(*records, zeta(*records, zipfianConstant))
	for i := 0; i < len(*workloads); i++ {
		w := ycsbWorkloads[(*workloads)[i]]
		r := runYcsb(w, cs, *clients, *seconds, *warmup, &inserted, scrambled, latest, record)
		r.Conns, r.Records = *conns, *records
		json.NewEncoder(os.Stdout).Encode(r)
	}
}

func runYcsb(w ycsbWorkload, cs []*clientv3.Client, clients int, seconds, warmup float64,
	inserted *atomic.Int64, scrambled, latest *zipfian, record func(int64, int) string) ycsbResult {
	names := []string{"read", "update", "insert", "scan", "read-modify-write"}
	seed := func(c int) int64 { return int64(c)*7919 + int64(w.name[0]) }
	run := runLoad(cs, clients, warmup, seconds, seed, func(_, _ time.Time) {},
		func(_ int, rng *rand.Rand, cli *clientv3.Client, ctx context.Context) (string, error) {
			choose := func() int64 { return w.choose(rng, inserted.Load(), scrambled, latest) }
			var err error
			switch p := rng.Float64(); {
			case p < w.read:
				_, err = cli.Get(ctx, keyName(choose()))
				return "read", err
			case p < w.read+w.update:
				k := choose()
				_, err = cli.Put(ctx, keyName(k), record(k, rng.Intn(26)))
				return "update", err
			case p < w.read+w.update+w.insert:
				k := inserted.Add(1) - 1
				_, err = cli.Put(ctx, keyName(k), record(k, 0))
				return "insert", err
			case p < w.read+w.update+w.insert+w.scan:
				_, err = cli.Get(ctx, keyName(choose()), clientv3.WithFromKey(),
					clientv3.WithLimit(int64(1+rng.Intn(100))))
				return "scan", err
			default:
				k := choose()
				if _, err = cli.Get(ctx, keyName(k)); err == nil {
					_, err = cli.Put(ctx, keyName(k), record(k, rng.Intn(26)))
				}
				return "read-modify-write", err
			}
		})
	lat := run.lat
	r := ycsbResult{Workload: w.name, Clients: clients, Seconds: seconds, Ops: map[string]opStats{},
		Errors: run.errors, FirstError: run.firstError}
	total := 0
	for _, name := range names {
		per := make([][]time.Duration, clients)
		for c := range lat {
			per[c] = lat[c][name]
		}
		var s result
		s.summarize(per, seconds)
		if s.Puts > 0 {
			r.Ops[name] = opStats{Count: s.Puts, MeanMs: s.MeanMs, P50Ms: s.P50Ms, P99Ms: s.P99Ms}
			total += s.Puts
		}
	}
	r.Throughput = float64(total) / seconds
	return r
}
