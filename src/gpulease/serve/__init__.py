"""Serving: the autoscaler's decisions and the load balancer."""
