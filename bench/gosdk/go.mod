module github.com/queueflow/queueflow-python/bench/gosdk

go 1.23

require github.com/queueflow/queueflow-go v0.0.0

replace github.com/queueflow/queueflow-go => ../../sdks/go
