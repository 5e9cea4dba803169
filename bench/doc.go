// Package bench drives the same client loop — acquire a lock with a fencing
// token, release it — against fencelock and the services people would pick
// instead (etcd's concurrency.Mutex, the Redis SET NX + INCR recipe), and
// reports pairs/s, acquire latency, fairness and a fencing-token order check
// per cell. It is its own module so the main module never depends on the
// peers' clients. cmd/fencebench is the command; peers.sh starts the peers.
package bench
