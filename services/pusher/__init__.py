"""The pusher service (`serve --mode pusher`): delivers the jobs of queues bound to push endpoints
to their URLs (docs/push.md)."""
