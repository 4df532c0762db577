"""Pure metric functions: acceptance, latency/throughput, Pareto fronts, bootstrap intervals."""
