"""The provisioner: an autoscaler (target concurrency, scale to zero, cooldowns, tenant limits) and the backends
that start and stop workers (threads in the gateway's process, local processes, Kubernetes Deployments, EC2
instances)."""
