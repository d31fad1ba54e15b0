// A do-nothing kube-scheduler extender, Go standard library only: the floor any extender
// pays per scheduling cycle (an HTTP exchange plus decoding the scheduler's ExtenderArgs
// and encoding an answer), measured by bench/bench_scheduler.py. Filter passes every
// candidate; prioritize gives every candidate the same score. Not part of the product.
//
// Wire format (k8s.io/kube-scheduler/extender/v1; its types have no json tags, so keys are
// the Go field names): request {"Pod": {...}, "Nodes": null, "NodeNames": [...]} with
// nodeCacheCapable: true (the shipped setting, the only one this serves); filter answer
// {"NodeNames", "FailedNodes", "Error"}; prioritize answer [{"Host", "Score"}].
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"sync/atomic"
)

// extenderArgs: the Pod is kept raw (the decoder still scans it, as any extender must
// read the whole body) instead of being built into Go values nobody reads.
type extenderArgs struct {
	Pod       json.RawMessage
	NodeNames *[]string
}

type filterResult struct {
	NodeNames   []string
	FailedNodes map[string]string
	Error       string
}

type hostPriority struct {
	Host  string
	Score int64
}

var filterCalls, prioritizeCalls atomic.Int64

func decode(w http.ResponseWriter, r *http.Request) ([]string, bool) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return nil, false
	}
	var args extenderArgs
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	if args.NodeNames == nil {
		http.Error(w, "no NodeNames: configure nodeCacheCapable: true", http.StatusBadRequest)
		return nil, false
	}
	return *args.NodeNames, true
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		log.Printf("write answer: %v", err)
	}
}

func filter(w http.ResponseWriter, r *http.Request) {
	names, ok := decode(w, r)
	if !ok {
		return
	}
	filterCalls.Add(1)
	reply(w, filterResult{NodeNames: names, FailedNodes: map[string]string{}})
}

func prioritize(w http.ResponseWriter, r *http.Request) {
	names, ok := decode(w, r)
	if !ok {
		return
	}
	prioritizeCalls.Add(1)
	scores := make([]hostPriority, len(names))
	for i, name := range names {
		scores[i] = hostPriority{Host: name, Score: 1}
	}
	reply(w, scores)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8890", "listen address")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/filter", filter)
	mux.HandleFunc("/prioritize", prioritize)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	// Call counts: the bench reads them to prove the scheduler really called this extender.
	mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, map[string]int64{"filter": filterCalls.Load(), "prioritize": prioritizeCalls.Load()})
	})
	log.Printf("noop extender (Go) listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, mux))
}
