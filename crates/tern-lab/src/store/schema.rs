//! The store's schema, as the list of migrations that build it: version N
//! of a store is `MIGRATIONS[..N]` applied in order, recorded in SQLite's
//! `user_version`. A change to the schema is a new entry at the end, never
//! an edit of one already released.

/// Version 1: hosts, runs, their measurements and histogram snapshots.
const V1: &str = "
CREATE TABLE hosts (
    id INTEGER PRIMARY KEY,
    hostname TEXT NOT NULL,
    -- hostname, kernel, CPU model and cores: what makes figures comparable.
    fingerprint TEXT NOT NULL UNIQUE,
    -- The probe's environment capture (JSON) when the host was first seen.
    environment TEXT NOT NULL
);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('complete', 'interrupted', 'failed')),
    host_id INTEGER NOT NULL REFERENCES hosts(id),
    -- The environment at the run (load average, memory available), JSON.
    environment TEXT NOT NULL,
    tern_version TEXT NOT NULL,
    command_line TEXT NOT NULL,
    config TEXT NOT NULL,
    label TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL NOT NULL,
    -- The run's whole report (JSON), as the command printed it with --json.
    result TEXT NOT NULL
);
CREATE INDEX runs_by_kind ON runs(kind, started_at);
CREATE TABLE measurements (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    subject TEXT NOT NULL,
    metric TEXT NOT NULL,
    value REAL NOT NULL,
    unit TEXT NOT NULL,
    better TEXT NOT NULL CHECK (better IN ('higher', 'lower')),
    size INTEGER,
    concurrency INTEGER,
    cpus INTEGER,
    load REAL,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX measurements_by_metric ON measurements(metric, subject);
CREATE TABLE histograms (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    subject TEXT NOT NULL,
    name TEXT NOT NULL,
    encoding TEXT NOT NULL,
    unit TEXT NOT NULL,
    snapshot TEXT NOT NULL,
    PRIMARY KEY (run_id, subject, name)
);
";

pub const MIGRATIONS: &[&str] = &[V1];
