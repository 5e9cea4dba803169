package verify

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	driver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/mysql"
	"github.com/fencelock/fencelock/postgres"
	"github.com/fencelock/fencelock/redis"
	"github.com/fencelock/fencelock/s3"
	"github.com/fencelock/fencelock/store"
)

// The workload keeps one list of strings per lock in a fence.Resource: the
// lock's name is both the fence domain and the key, and the value is the
// list, one element per line. The harness's object store is one resource;
// PostgreSQL, MySQL/MariaDB, Redis and S3 are more (OpenResource); a custom adapter
// implements fence.Resource and runs the workers itself (WorkerConfig.Open,
// Config.Worker).
//
// A worker process opens one resource and calls it from one goroutine at a
// time; it closes the resource at the end if it is an io.Closer. Every call
// gets a context that ends at the worker's operation timeout. The harness
// records an error that wraps fencelock.ErrStaleToken as a refusal (the
// call certainly changed nothing); any other error as an unknown outcome
// (it may or may not have taken effect). Versions, where the resource
// numbers them, let the store checker test the order of accepted writes.
//
// In the negative control the workers send every write and fence raise
// with one constant token, unfencedToken, whatever their grant's token:
// every resource then accepts every write, as if it did not fence at all.

// unfencedToken is the token of every write in the negative control: far
// above any token a test cluster issues, and exact in every adapter.
const unfencedToken fencelock.Token = 1 << 50

// OpenFunc opens the resource a worker process writes to. spec is
// Config.Resource as given to the harness (for the object store, the
// store's URL).
type OpenFunc func(ctx context.Context, spec string) (fence.Resource, error)

// OpenResource opens the built-in resources by the scheme of spec:
//
//   - http:// or https://: the fenced object store at that URL ("fencelock
//     store");
//   - postgres:// or postgresql://: a PostgreSQL database (a pgx DSN); the
//     lists live in the postgres.Table fencelock_verify_lists, fenced by
//     the domain fence (table fencelock_fences); both tables are created if
//     missing;
//   - mysql://DSN: a MySQL or MariaDB database, DSN in the form of
//     github.com/go-sql-driver/mysql (user:password@tcp(host:port)/dbname,
//     a database name required); the lists live in the mysql.Table
//     fencelock_verify_lists, fenced by the domain fence (table
//     fencelock_fences); both tables are created if missing;
//   - redis:// or rediss://: a Redis server (go-redis URL); the lists are
//     redis.Strings at fencelock:verify:DOMAIN;
//   - s3://BUCKET/PREFIX?endpoint=URL: an existing S3 bucket (s3.Open); the
//     lists are values of an s3.Bucket under PREFIX.
func OpenResource(ctx context.Context, spec string) (fence.Resource, error) {
	scheme, _, _ := strings.Cut(spec, "://")
	switch strings.ToLower(scheme) {
	case "http", "https":
		c, err := store.NewClient(spec)
		if err != nil {
			return nil, err
		}
		return c.Resource(), nil
	case "postgres", "postgresql":
		return openPostgres(ctx, spec)
	case "mysql":
		return openMySQL(ctx, spec[len("mysql://"):])
	case "redis", "rediss":
		return openRedis(ctx, spec)
	case "s3":
		return s3.Open(ctx, spec)
	}
	return nil, fmt.Errorf("open resource %q: want an http://, postgres://, mysql://, redis:// or s3:// URL: %w", Redact(spec), fencelock.ErrInvalidArgument)
}

// mysqlTable is a mysql.Table that closes its database handle.
type mysqlTable struct {
	*mysql.Table
	db *sql.DB
}

func (t mysqlTable) Close() error { return t.db.Close() }

func openMySQL(ctx context.Context, dsn string) (fence.Resource, error) {
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("open mysql resource: %w: %w", fencelock.ErrInvalidArgument, err)
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("open mysql resource: the DSN names no database (user@tcp(host:port)/dbname): %w", fencelock.ErrInvalidArgument)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("open mysql resource: %w", err)
	}
	db.SetMaxOpenConns(2)
	table, err := mysql.NewTable(db, "fencelock_verify_lists")
	if err == nil {
		err = table.Create(ctx)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open mysql resource: %w", err)
	}
	return mysqlTable{table, db}, nil
}

// pgTable is a postgres.Table that closes its pool.
type pgTable struct {
	*postgres.Table
	pool *pgxpool.Pool
}

func (t pgTable) Close() error {
	t.pool.Close()
	return nil
}

func openPostgres(ctx context.Context, dsn string) (fence.Resource, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres resource: %w: %w", fencelock.ErrInvalidArgument, err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres resource: %w", err)
	}
	table, err := postgres.NewTable(pool, "fencelock_verify_lists")
	if err == nil {
		err = table.Create(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres resource: %w", err)
	}
	return pgTable{table, pool}, nil
}

// redisStrings is a redis.Strings that closes its client.
type redisStrings struct {
	*redis.Strings
	rdb *goredis.Client
}

func (r redisStrings) Close() error { return r.rdb.Close() }

func openRedis(ctx context.Context, url string) (fence.Resource, error) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("open redis resource: %w: %w", fencelock.ErrInvalidArgument, err)
	}
	rdb := goredis.NewClient(opts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("open redis resource: %w", err)
	}
	return redisStrings{redis.NewStrings(rdb, "fencelock:verify:"), rdb}, nil
}

// Redact returns spec with the password of a URL (or of a mysql:// DSN)
// replaced by "xxxxx", for printing.
func Redact(spec string) string {
	if scheme, dsn, ok := strings.Cut(spec, "://"); ok && strings.EqualFold(scheme, "mysql") {
		cfg, err := driver.ParseDSN(dsn)
		if err != nil {
			return scheme + "://(a DSN that does not parse)"
		}
		if cfg.Passwd != "" {
			cfg.Passwd = "xxxxx"
		}
		return scheme + "://" + cfg.FormatDSN()
	}
	u, err := url.Parse(spec)
	if err != nil || u.User == nil {
		return spec
	}
	return u.Redacted()
}

// builtinResource reports whether spec names a resource OpenResource can
// open ("" and "store" mean the harness's object store).
func builtinResource(spec string) bool {
	if spec == "" || spec == ResourceStore {
		return true
	}
	scheme, _, ok := strings.Cut(spec, "://")
	if !ok {
		return false
	}
	switch strings.ToLower(scheme) {
	case "http", "https", "postgres", "postgresql", "mysql", "redis", "rediss", "s3":
		return true
	}
	return false
}

func splitList(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

func joinList(l []string) []byte {
	if len(l) == 0 {
		return nil
	}
	return []byte(strings.Join(l, "\n") + "\n")
}
