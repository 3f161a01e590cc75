module github.com/queueflow/queueflow-go

go 1.23
