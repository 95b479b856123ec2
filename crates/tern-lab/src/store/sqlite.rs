//! The store itself: an SQLite database opened and migrated, runs
//! inserted in one transaction, listed, read back, deleted, and the points
//! behind a chart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};

use super::run::{
    better_name, fingerprint, Filter, Host, Measurement, Point, Run, RunData, RunSummary, Snapshot, Status,
};
use super::schema;
use crate::probe::env::Environment;
use crate::probe::figure::Better;

/// What went wrong with the store, with the path it concerns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("store {path}: {source}")]
    Sqlite { path: String, source: rusqlite::Error },
    #[error("store {path}: schema version {found} is newer than this tern knows ({known}); use a newer tern")]
    TooNew { path: String, found: i64, known: i64 },
    #[error("no run {0} in the store")]
    NoRun(i64),
    #[error("{0}")]
    Format(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The store's default place: `$XDG_DATA_HOME/tern/lab.sqlite`, else
/// `~/.local/share/tern/lab.sqlite`.
pub fn default_path() -> PathBuf {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|d| Path::new(d).is_absolute())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    data.join("tern").join("lab.sqlite")
}

pub struct Store {
    conn: Connection,
    path: String,
}

impl Store {
    /// Opens (creating it and its directory if needed) and migrates the
    /// store at `path`.
    pub fn open(path: &Path) -> Result<Store, Error> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| std::io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())))?;
        }
        let shown = path.display().to_string();
        let sql = |source| Error::Sqlite { path: shown.clone(), source };
        let conn = Connection::open(path).map_err(sql)?;
        // Several lab commands (a bench storing while the dashboard reads)
        // may use one store at once.
        conn.busy_timeout(Duration::from_secs(30)).map_err(sql)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(sql)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(sql)?;
        let mut store = Store { conn, path: shown };
        store.migrate()?;
        Ok(store)
    }

    fn err(&self, source: rusqlite::Error) -> Error {
        Error::Sqlite { path: self.path.clone(), source }
    }

    /// The schema version this store is at.
    pub fn version(&self) -> Result<i64, Error> {
        self.conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(|e| self.err(e))
    }

    fn migrate(&mut self) -> Result<(), Error> {
        let known = schema::MIGRATIONS.len() as i64;
        let found = self.version()?;
        if found > known {
            return Err(Error::TooNew { path: self.path.clone(), found, known });
        }
        for (i, step) in schema::MIGRATIONS.iter().enumerate().skip(found as usize) {
            let tx = self.conn.transaction().map_err(|e| Error::Sqlite { path: self.path.clone(), source: e })?;
            let done = tx.execute_batch(step).and_then(|()| tx.pragma_update(None, "user_version", i as i64 + 1));
            done.and_then(|()| tx.commit()).map_err(|e| Error::Sqlite { path: self.path.clone(), source: e })?;
        }
        Ok(())
    }

    /// Stores a run, whole, in one transaction, and returns its id.
    pub fn insert(&mut self, run: &RunData) -> Result<i64, Error> {
        Ok(self.insert_all([run])?[0])
    }

    /// Stores runs, all or none, in one transaction, and returns their ids.
    pub fn insert_all<'a>(&mut self, runs: impl IntoIterator<Item = &'a RunData>) -> Result<Vec<i64>, Error> {
        let tx = self.conn.unchecked_transaction().map_err(|e| self.err(e))?;
        let ids = runs.into_iter().map(|run| self.insert_in(&tx, run)).collect::<Result<_, _>>()?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(ids)
    }

    /// Writes a run inside the caller's transaction `tx`.
    fn insert_in(&self, tx: &Connection, run: &RunData) -> Result<i64, Error> {
        let sql = |source| self.err(source);
        let env_json = serde_json::to_string(&run.environment).map_err(|e| Error::Format(e.to_string()))?;
        let print = fingerprint(&run.environment);
        tx.execute(
            "INSERT INTO hosts (hostname, fingerprint, environment) VALUES (?1, ?2, ?3)
             ON CONFLICT (fingerprint) DO NOTHING",
            params![run.environment.hostname, print, env_json],
        )
        .map_err(sql)?;
        let host_id: i64 =
            tx.query_row("SELECT id FROM hosts WHERE fingerprint = ?1", [&print], |r| r.get(0)).map_err(sql)?;
        tx.execute(
            "INSERT INTO runs (kind, status, host_id, environment, tern_version, command_line, config, label,
                               started_at, finished_at, result)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                run.kind,
                run.status.name(),
                host_id,
                env_json,
                run.tern_version,
                serde_json::to_string(&run.command_line).unwrap_or_default(),
                run.config.to_string(),
                run.label,
                run.started_at,
                run.finished_at,
                run.result.to_string(),
            ],
        )
        .map_err(sql)?;
        let id = tx.last_insert_rowid();
        {
            let mut m = tx
                .prepare(
                    "INSERT INTO measurements (run_id, seq, subject, metric, value, unit, better, size, concurrency,
                                               cpus, load)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )
                .map_err(sql)?;
            for (seq, x) in run.measurements.iter().enumerate() {
                m.execute(params![
                    id,
                    seq as i64,
                    x.subject,
                    x.metric,
                    x.value,
                    x.unit,
                    better_name(x.better),
                    x.size.map(|v| v as i64),
                    x.concurrency.map(|v| v as i64),
                    x.cpus.map(|v| v as i64),
                    x.load,
                ])
                .map_err(sql)?;
            }
            let mut h = tx
                .prepare(
                    "INSERT INTO histograms (run_id, subject, name, encoding, unit, snapshot)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(sql)?;
            for x in &run.histograms {
                h.execute(params![id, x.subject, x.name, x.encoding, x.unit, x.snapshot]).map_err(sql)?;
            }
        }
        Ok(id)
    }

    /// The runs matching `filter`, newest first.
    pub fn list(&self, filter: &Filter) -> Result<Vec<RunSummary>, Error> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT r.id, r.kind, r.status, h.id, h.hostname, h.fingerprint, r.label, r.started_at,
                        r.finished_at, (SELECT COUNT(*) FROM measurements m WHERE m.run_id = r.id)
                 FROM runs r JOIN hosts h ON h.id = r.host_id
                 WHERE (?1 IS NULL OR r.kind = ?1) AND (?2 IS NULL OR h.id = ?2) AND (?3 IS NULL OR r.status = ?3)
                   AND (?4 IS NULL OR instr(r.label, ?4) > 0)
                 ORDER BY r.started_at DESC, r.id DESC",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![filter.kind, filter.host, filter.status.map(Status::name), filter.text], |r| {
                Ok(RunSummary {
                    id: r.get(0)?,
                    kind: r.get(1)?,
                    status: Status::parse(&r.get::<_, String>(2)?),
                    host: Host { id: r.get(3)?, hostname: r.get(4)?, fingerprint: r.get(5)? },
                    label: r.get(6)?,
                    started_at: r.get(7)?,
                    finished_at: r.get(8)?,
                    measurements: r.get::<_, i64>(9)? as u64,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Every host runs were stored for.
    pub fn hosts(&self) -> Result<Vec<(Host, Environment, u64)>, Error> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT h.id, h.hostname, h.fingerprint, h.environment,
                        (SELECT COUNT(*) FROM runs r WHERE r.host_id = h.id)
                 FROM hosts h ORDER BY h.id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    Host { id: r.get(0)?, hostname: r.get(1)?, fingerprint: r.get(2)? },
                    r.get::<_, String>(3)?,
                    r.get::<_, i64>(4)? as u64,
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (host, env, runs) = row.map_err(|e| self.err(e))?;
            out.push((host, parse_json(&env)?, runs));
        }
        Ok(out)
    }

    /// One run, whole.
    pub fn get(&self, id: i64) -> Result<Run, Error> {
        let row = self
            .conn
            .query_row(
                "SELECT r.kind, r.status, r.environment, r.tern_version, r.command_line, r.config, r.label,
                        r.started_at, r.finished_at, r.result, h.id, h.hostname, h.fingerprint
                 FROM runs r JOIN hosts h ON h.id = r.host_id WHERE r.id = ?1",
                [id],
                |r| {
                    Ok((
                        (r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?),
                        (r.get::<_, String>(3)?, r.get::<_, String>(4)?, r.get::<_, String>(5)?),
                        (r.get::<_, String>(6)?, r.get::<_, f64>(7)?, r.get::<_, f64>(8)?, r.get::<_, String>(9)?),
                        Host { id: r.get(10)?, hostname: r.get(11)?, fingerprint: r.get(12)? },
                    ))
                },
            )
            .optional()
            .map_err(|e| self.err(e))?
            .ok_or(Error::NoRun(id))?;
        let ((kind, status, env), (version, command_line, config), (label, started_at, finished_at, result), host) =
            row;
        let data = RunData {
            kind,
            status: Status::parse(&status),
            environment: parse_json(&env)?,
            tern_version: version,
            command_line: parse_json(&command_line)?,
            config: parse_json(&config)?,
            label,
            started_at,
            finished_at,
            result: parse_json(&result)?,
            measurements: self.measurements(id)?,
            histograms: self.histograms(id)?,
        };
        Ok(Run { id, host, data })
    }

    fn measurements(&self, id: i64) -> Result<Vec<Measurement>, Error> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT subject, metric, value, unit, better, size, concurrency, cpus, load
                 FROM measurements WHERE run_id = ?1 ORDER BY seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([id], |r| {
                Ok(Measurement {
                    subject: r.get(0)?,
                    metric: r.get(1)?,
                    value: r.get(2)?,
                    unit: r.get(3)?,
                    better: if r.get::<_, String>(4)? == "higher" { Better::Higher } else { Better::Lower },
                    size: r.get::<_, Option<i64>>(5)?.map(|v| v as u64),
                    concurrency: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
                    cpus: r.get::<_, Option<i64>>(7)?.map(|v| v as u64),
                    load: r.get(8)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    fn histograms(&self, id: i64) -> Result<Vec<Snapshot>, Error> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT subject, name, encoding, unit, snapshot FROM histograms WHERE run_id = ?1
                 ORDER BY subject, name",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([id], |r| {
                Ok(Snapshot {
                    subject: r.get(0)?,
                    name: r.get(1)?,
                    encoding: r.get(2)?,
                    unit: r.get(3)?,
                    snapshot: r.get(4)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Deletes a run with its measurements and histograms.
    pub fn delete(&mut self, id: i64) -> Result<(), Error> {
        let n = self.conn.execute("DELETE FROM runs WHERE id = ?1", [id]).map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(Error::NoRun(id));
        }
        Ok(())
    }

    /// Every (metric, subject) pair stored, with its unit: the menus of the
    /// dashboard.
    pub fn metrics(&self) -> Result<Vec<(String, String)>, Error> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT metric, unit FROM measurements ORDER BY metric")
            .map_err(|e| self.err(e))?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Every measurement of `metric` (of `subject`, when given) with its
    /// run, oldest run first: the data behind a chart.
    pub fn points(&self, metric: &str, subject: Option<&str>) -> Result<Vec<Point>, Error> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT r.id, r.kind, r.label, r.started_at, r.status, h.id, h.hostname, h.fingerprint,
                        m.subject, m.metric, m.value, m.unit, m.better, m.size, m.concurrency, m.cpus, m.load
                 FROM measurements m JOIN runs r ON r.id = m.run_id JOIN hosts h ON h.id = r.host_id
                 WHERE m.metric = ?1 AND (?2 IS NULL OR m.subject = ?2)
                 ORDER BY r.started_at, r.id, m.seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![metric, subject], |r| {
                Ok(Point {
                    run: r.get(0)?,
                    kind: r.get(1)?,
                    label: r.get(2)?,
                    started_at: r.get(3)?,
                    status: Status::parse(&r.get::<_, String>(4)?),
                    host: Host { id: r.get(5)?, hostname: r.get(6)?, fingerprint: r.get(7)? },
                    m: Measurement {
                        subject: r.get(8)?,
                        metric: r.get(9)?,
                        value: r.get(10)?,
                        unit: r.get(11)?,
                        better: if r.get::<_, String>(12)? == "higher" { Better::Higher } else { Better::Lower },
                        size: r.get::<_, Option<i64>>(13)?.map(|v| v as u64),
                        concurrency: r.get::<_, Option<i64>>(14)?.map(|v| v as u64),
                        cpus: r.get::<_, Option<i64>>(15)?.map(|v| v as u64),
                        load: r.get(16)?,
                    },
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_json::from_str(text).map_err(|e| Error::Format(format!("a stored value is not what this tern expects: {e}")))
}
