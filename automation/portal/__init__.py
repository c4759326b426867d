"""The self-service portal: a Kubernetes-shaped HTTP API and a web page over the automation layer."""
