// Command gosdk runs the Go SDK's worker loop for the benchmark's remote drain (W1a with
// --remote-client go-sdk): --loops workers of the queue, each with concurrency and batch size
// --max-jobs and a no-op handler, in one process.
//
// It speaks the line protocol of bench/remote_worker.py: it prints "ready" once its client is
// built, starts the workers when it reads "go" on stdin, stops them gracefully when it reads
// "stop" (or stdin closes), then prints {"completed": N} and exits.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"

	qf "github.com/unofficial-queueflow/client-go"
)

func main() {
	baseURL := flag.String("base-url", "", "the api process, e.g. http://127.0.0.1:8080")
	queue := flag.String("queue", "", "the queue to drain")
	loops := flag.Int("loops", 8, "workers in this process")
	maxJobs := flag.Int("max-jobs", 50, "each worker's concurrency and lease batch")
	waitSecs := flag.Int("wait-secs", 1, "long-poll wait per lease call")
	token := flag.String("token", "bench", "bearer token (a --dev server takes any)")
	cpuProfile := flag.String("cpuprofile", os.Getenv("GOSDK_CPUPROFILE"),
		"write a CPU profile of the drain to this file plus \".<pid>\" (go tool pprof); default $GOSDK_CPUPROFILE")
	flag.Parse()
	if *baseURL == "" || *queue == "" {
		fmt.Fprintln(os.Stderr, "--base-url and --queue are required")
		os.Exit(2)
	}

	client := qf.NewClient(*baseURL, *token)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var completed atomic.Int64
	noop := func(ctx context.Context, job *qf.Job) (map[string]any, error) {
		completed.Add(1)
		return map[string]any{"ok": true}, nil
	}

	stdin := bufio.NewScanner(os.Stdin)
	say("ready")
	if !stdin.Scan() || strings.TrimSpace(stdin.Text()) != "go" {
		return
	}
	if *cpuProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", *cpuProfile, os.Getpid()))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	failures := make(chan error, *loops)
	for i := 0; i < *loops; i++ {
		w := qf.NewWorker(client, *queue, qf.WorkerOptions{
			LeaseSecs: 60, WaitSecs: *waitSecs, Concurrency: *maxJobs, BatchSize: *maxJobs, Logger: quiet,
		})
		w.Handle("echo", noop)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil {
				failures <- err
				stop()
			}
		}()
	}
	go func() {
		for stdin.Scan() {
			if strings.TrimSpace(stdin.Text()) == "stop" {
				break
			}
		}
		stop()
	}()
	<-ctx.Done()
	wg.Wait()
	close(failures)
	pprof.StopCPUProfile() // (before the answer: the harness may stop this process once it has it)
	out, _ := json.Marshal(map[string]int64{"completed": completed.Load()})
	say(string(out))
	for err := range failures {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func say(line string) {
	fmt.Println(line)
}
