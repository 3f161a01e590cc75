"""The workflow advancer: consumes step outcomes from the outbox and moves workflows forward."""
