package main

// The modes that drive etcd's concurrency package (go.etcd.io/etcd/client/v3/concurrency)
// unchanged: Mutex, Election and STM, each over sessions (leases kept alive by the
// client's KeepAlive stream).

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// One critical section of `locks`: when the worker held the mutex (local monotonic ns
// since the start), what it read, whether its write guarded by IsOwner (a compare on
// the lock key's create revision: the fencing token) succeeded, and when the worker
// learnt that its session's lease was gone (0: not before it released).
type section struct {
	Worker   int    `json:"worker"`
	Lease    int64  `json:"lease"`
	Key      string `json:"key"`
	LockRev  int64  `json:"lock_rev"`
	Acquired int64  `json:"acquired"`
	Released int64  `json:"released"`
	Read     int64  `json:"read"`
	Wrote    bool   `json:"wrote"`
	WriteRev int64  `json:"write_rev"`
	Lost     int64  `json:"lost"`
	Err      string `json:"err,omitempty"`
}

// etcd-go locks -endpoints A,B -workers N -seconds S -ttl T -hold-ms H -prefix P -counter C
//
// N workers, each with a client and a session of its own (lease TTL T), take the
// mutex P for S seconds, again and again: read counter C, hold H ms, write C+1 in a
// transaction guarded by the mutex's IsOwner, unlock. One JSON line per section.
func locks(args []string) {
	fs := flag.NewFlagSet("locks", flag.ExitOnError)
	endpoints := fs.String("endpoints", "127.0.0.1:2379", "comma-separated endpoints")
	workers := fs.Int("workers", 3, "workers")
	seconds := fs.Float64("seconds", 5, "duration")
	ttl := fs.Int("ttl", 5, "session lease TTL, seconds")
	holdMs := fs.Int("hold-ms", 50, "how long a section holds the mutex")
	prefix := fs.String("prefix", "/lock/", "the mutex's prefix")
	counter := fs.String("counter", "/counter", "the guarded counter's key")
	fs.Parse(args)
	eps := strings.Split(*endpoints, ",")
	start := time.Now()
	since := func() int64 { return time.Since(start).Nanoseconds() }
	deadline := start.Add(time.Duration(*seconds * float64(time.Second)))
	out := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	emit := func(s section) {
		mu.Lock()
		defer mu.Unlock()
		out.Encode(s)
	}
	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			// Every endpoint, this worker's first: the client fails over.
			mine := append([]string{eps[w%len(eps)]}, eps...)
			cli := connect(mine)
			defer cli.Close()
			var sess *concurrency.Session
			var lost atomic.Int64
			for time.Now().Before(deadline) {
				if sess == nil {
					s, err := concurrency.NewSession(cli, concurrency.WithTTL(*ttl))
					if err != nil {
						emit(section{Worker: w, Err: "session: " + err.Error()})
						time.Sleep(100 * time.Millisecond)
						continue
					}
					sess = s
					lost.Store(0)
					go func(s *concurrency.Session) {
						<-s.Done()
						lost.CompareAndSwap(0, since())
					}(s)
				}
				m := concurrency.NewMutex(sess, *prefix)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := m.Lock(ctx)
				cancel()
				if err != nil {
					emit(section{Worker: w, Lease: int64(sess.Lease()), Err: "lock: " + err.Error()})
					sess.Close()
					sess = nil
					continue
				}
				s := section{Worker: w, Lease: int64(sess.Lease()), Key: m.Key(), Acquired: since()}
				ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
				if r, err := cli.Get(ctx, m.Key()); err == nil && len(r.Kvs) == 1 {
					s.LockRev = r.Kvs[0].CreateRevision
				}
				r, err := cli.Get(ctx, *counter)
				if err == nil && len(r.Kvs) == 1 {
					s.Read, _ = strconv.ParseInt(string(r.Kvs[0].Value), 10, 64)
				}
				if err == nil {
					time.Sleep(time.Duration(*holdMs) * time.Millisecond)
					t, terr := cli.Txn(ctx).If(m.IsOwner()).
						Then(clientv3.OpPut(*counter, strconv.FormatInt(s.Read+1, 10))).Commit()
					if terr == nil {
						s.Wrote = t.Succeeded
						s.WriteRev = t.Header.Revision
					} else {
						s.Err = "write: " + terr.Error()
					}
				} else {
					s.Err = "read: " + err.Error()
				}
				s.Released = since()
				s.Lost = lost.Load()
				m.Unlock(ctx)
				cancel()
				emit(s)
				if s.Lost != 0 {
					sess = nil
				}
			}
			if sess != nil {
				sess.Close()
			}
		}(w)
	}
	wg.Wait()
}

// etcd-go elect -endpoints A,B -prefix P
//
// Two candidates campaign for election P; the first wins, the second waits. The
// observer sees the first as leader; the first proclaims a new value, which Leader()
// returns; it resigns, and the second wins. Prints the steps, one per line.
func elect(args []string) {
	fs := flag.NewFlagSet("elect", flag.ExitOnError)
	endpoints := fs.String("endpoints", "127.0.0.1:2379", "comma-separated endpoints")
	prefix := fs.String("prefix", "/election/", "the election's prefix")
	fs.Parse(args)
	cli := connect(strings.Split(*endpoints, ","))
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must := func(what string, err error) {
		if err != nil {
			fmt.Fprintf(os.Stderr, "etcd-go elect: %s: %v\n", what, err)
			os.Exit(1)
		}
	}
	s1, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	must("session 1", err)
	s2, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	must("session 2", err)
	e1 := concurrency.NewElection(s1, *prefix)
	e2 := concurrency.NewElection(s2, *prefix)
	must("campaign alice", e1.Campaign(ctx, "alice"))
	fmt.Println("alice leads")
	won := make(chan error, 1)
	go func() { won <- e2.Campaign(ctx, "bob") }()
	select {
	case err := <-won:
		fmt.Printf("bob won while alice led (%v)\n", err)
	case <-time.After(500 * time.Millisecond):
		fmt.Println("bob waits")
	}
	l, err := e1.Leader(ctx)
	must("leader", err)
	fmt.Printf("leader %s\n", l.Kvs[0].Value)
	must("proclaim", e1.Proclaim(ctx, "alice-2"))
	l, err = e2.Leader(ctx)
	must("leader", err)
	fmt.Printf("leader %s\n", l.Kvs[0].Value)
	obs := e2.Observe(ctx)
	must("resign", e1.Resign(ctx))
	must("campaign bob", <-won)
	fmt.Println("bob leads")
	for r := range obs {
		v := string(r.Kvs[0].Value)
		if v == "bob" {
			fmt.Println("observed bob")
			break
		}
	}
	// Bob's session ends (its lease revoked): its key goes with it.
	must("close", s2.Close())
	l, err = e1.Leader(ctx)
	if err == concurrency.ErrElectionNoLeader {
		fmt.Println("no leader")
	} else {
		must("leader after close", err)
		fmt.Printf("leader %s\n", l.Kvs[0].Value)
	}
	s1.Close()
}

// etcd-go stm -endpoints A,B -accounts N -transfers T -workers W
//
// W workers make T transfers each between N accounts of 100 through STM (serializable
// snapshot isolation, retried on conflict); prints the sum of the accounts, which
// must stay N*100.
func stm(args []string) {
	fs := flag.NewFlagSet("stm", flag.ExitOnError)
	endpoints := fs.String("endpoints", "127.0.0.1:2379", "comma-separated endpoints")
	accounts := fs.Int("accounts", 4, "accounts")
	transfers := fs.Int("transfers", 20, "transfers per worker")
	workers := fs.Int("workers", 3, "workers")
	fs.Parse(args)
	cli := connect(strings.Split(*endpoints, ","))
	defer cli.Close()
	key := func(i int) string { return fmt.Sprintf("/stm/account/%d", i) }
	for i := 0; i < *accounts; i++ {
		if _, err := cli.Put(context.Background(), key(i), "100"); err != nil {
			fmt.Fprintf(os.Stderr, "etcd-go stm: %v\n", err)
			os.Exit(1)
		}
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for t := 0; t < *transfers; t++ {
				from, to := (w+t)%*accounts, (w+2*t+1)%*accounts
				if from == to {
					to = (to + 1) % *accounts
				}
				_, err := concurrency.NewSTM(cli, func(s concurrency.STM) error {
					a, _ := strconv.Atoi(s.Get(key(from)))
					b, _ := strconv.Atoi(s.Get(key(to)))
					s.Put(key(from), strconv.Itoa(a-1))
					s.Put(key(to), strconv.Itoa(b+1))
					return nil
				})
				if err != nil {
					if failed.Add(1) == 1 {
						fmt.Fprintf(os.Stderr, "etcd-go stm: transfer: %v\n", err)
					}
				}
			}
		}(w)
	}
	wg.Wait()
	sum := 0
	for i := 0; i < *accounts; i++ {
		r, err := cli.Get(context.Background(), key(i))
		if err != nil || len(r.Kvs) != 1 {
			fmt.Fprintf(os.Stderr, "etcd-go stm: read %s: %v\n", key(i), err)
			os.Exit(1)
		}
		v, _ := strconv.Atoi(string(r.Kvs[0].Value))
		sum += v
	}
	fmt.Printf("sum %d failed %d\n", sum, failed.Load())
}
