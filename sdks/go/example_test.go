package queueflow_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	queueflow "github.com/unofficial-queueflow/client-go"
)

func ExampleWorker() {
	client := queueflow.NewClient("http://localhost:8000", "tenant-key", queueflow.WithWorkerToken("worker-token"))
	w := queueflow.NewWorker(client, "images", queueflow.WorkerOptions{LeaseSecs: 60, WaitSecs: 20, Concurrency: 4, BatchSize: 4})
	w.Handle("resize-image", func(ctx context.Context, job *queueflow.Job) (map[string]any, error) {
		if _, ok := job.Payload["url"].(string); !ok {
			return nil, queueflow.Permanent(errors.New("payload has no url"))
		}
		return map[string]any{"ok": true}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Run(ctx); queueflow.IsAuthError(err) {
		fmt.Println("check the worker token:", err)
	}
}

func ExampleClient_ListJobs() {
	client := queueflow.NewClient("http://localhost:8000", "tenant-key")
	ctx := context.Background()
	params := queueflow.ListJobsParams{Queue: "images", ListParams: queueflow.ListParams{Limit: 100}}
	for {
		page, err := client.ListJobs(ctx, params)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, job := range page.Jobs {
			fmt.Println(job.ID, job.Status)
		}
		if page.NextCursor == nil {
			return
		}
		params.Cursor = *page.NextCursor
	}
}

func ExampleClient_JobEvents() {
	client := queueflow.NewClient("http://localhost:8000", "tenant-key")
	stream, err := client.JobEvents(context.Background(), "00000000-0000-0000-0000-000000000000")
	if queueflow.IsNotFound(err) {
		fmt.Println("no such job")
		return
	} else if err != nil {
		fmt.Println(err)
		return
	}
	for job, err := range stream.All() {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(job.Status)
	}
}

func ExampleClient_CreateCron() {
	client := queueflow.NewClient("http://localhost:8000", "tenant-key")
	ctx := context.Background()
	// Each night at 02:00 Berlin time, start the ETL workflow (named nightly-etl@<occurrence>).
	etl := queueflow.CreateWorkflowRequest{Name: "etl", Steps: []queueflow.WorkflowStep{
		{Name: "extract", TaskName: "etl.extract", Queue: "etl"},
		{Name: "load", TaskName: "etl.load", Queue: "etl", DependsOn: []string{"extract"}},
	}}
	created, err := client.CreateCron(ctx, queueflow.CreateCronRequest{
		Name: "nightly-etl", CronExpr: "0 2 * * *", Timezone: "Europe/Berlin", Workflow: &etl,
	})
	if err != nil {
		fmt.Println("create:", err)
		return
	}
	schedule, err := client.GetCron(ctx, created.CronID)
	if err == nil && schedule.Workflow != nil {
		fmt.Println(schedule.Name, "starts", schedule.Workflow.Name, "next at", schedule.NextRunAt)
	}
}
