//! The `system` service: `get_system_stats` (seed 004 §3.2, property 10).
//!
//! CPU and memory come from `sysinfo` (CPU usage needs two samples, so a call takes about
//! 200 ms); the disk figures are those of the file system holding the user's workspace.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use sysinfo::{MINIMUM_CPU_UPDATE_INTERVAL, ProcessesToUpdate, System};

use super::jail::Jail;
use super::{BuiltinConfig, blocking, parse_args};
use agentry_tools::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

pub fn tools(cfg: &BuiltinConfig) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(GetSystemStats::new(cfg))]
}

pub struct GetSystemStats {
    spec: ToolSpec,
    max_processes: usize,
}

#[derive(Deserialize)]
struct StatsArgs {
    #[serde(default)]
    include_processes: bool,
    #[serde(default)]
    process_limit: Option<usize>,
    #[serde(default)]
    sort_by: Option<String>,
}

impl GetSystemStats {
    pub fn new(cfg: &BuiltinConfig) -> Self {
        let spec = ToolSpec::new(
            "system",
            "get_system_stats",
            "Get the host's CPU usage (percent), memory used and total (bytes), free and total \
             disk space of the workspace's file system (bytes), load average and uptime; with \
             include_processes=true also the top processes by CPU or memory.",
            json!({
                "type": "object",
                "properties": {
                    "include_processes": {"type": "boolean", "default": false},
                    "process_limit": {"type": "integer", "minimum": 1, "maximum": 100,
                                      "description": format!("Default {}", cfg.system_max_processes)},
                    "sort_by": {"type": "string", "enum": ["cpu", "memory"], "default": "cpu"}
                }
            }),
        );
        Self {
            spec,
            max_processes: cfg.system_max_processes,
        }
    }
}

fn finite(x: f32) -> f64 {
    if x.is_finite() { f64::from(x) } else { 0.0 }
}

#[async_trait]
impl Tool for GetSystemStats {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: StatsArgs = parse_args("get_system_stats", args)?;
        let by_memory = match args.sort_by.as_deref().unwrap_or("cpu") {
            "cpu" => false,
            "memory" => true,
            other => {
                return Err(ToolError::invalid(format!(
                    "sort_by must be cpu or memory, not {other:?}"
                )));
            }
        };
        let limit = args
            .process_limit
            .unwrap_or(self.max_processes)
            .clamp(1, 100);
        let workspace = ctx.workspace.clone();
        blocking(move || {
            let jail = Jail::open(&workspace)?;
            let fs = nix::sys::statvfs::statvfs(jail.canonical_root()).map_err(|e| {
                ToolError::failed(format!("cannot read the file system statistics: {e}"))
            })?;
            let frsize = fs.fragment_size() as u64;
            let disk_free = (fs.blocks_available() as u64).saturating_mul(frsize);
            let disk_total = (fs.blocks() as u64).saturating_mul(frsize);

            let mut sys = System::new().map_err(|e| {
                ToolError::failed(format!("cannot read the system statistics: {e}"))
            })?;
            sys.refresh_cpu_usage();
            if args.include_processes {
                sys.refresh_processes(ProcessesToUpdate::All, true);
            }
            std::thread::sleep(MINIMUM_CPU_UPDATE_INTERVAL);
            sys.refresh_cpu_usage();
            sys.refresh_memory();
            let load = System::load_average()
                .map(|l| json!({"one": l.one, "five": l.five, "fifteen": l.fifteen}))
                .unwrap_or(Value::Null);
            let mut stats = json!({
                "cpu_percent": finite(sys.global_cpu_usage()),
                "cpu_count": sys.cpus().len(),
                "memory_used": sys.used_memory(),
                "memory_total": sys.total_memory(),
                "memory_available": sys.available_memory(),
                "swap_used": sys.used_swap(),
                "swap_total": sys.total_swap(),
                "disk_free": disk_free,
                "disk_total": disk_total,
                "load_average": load,
                "uptime_secs": System::uptime().ok(),
            });
            if args.include_processes {
                sys.refresh_processes(ProcessesToUpdate::All, true);
                let mut procs: Vec<_> = sys.processes().values().collect();
                if by_memory {
                    procs.sort_by_key(|p| std::cmp::Reverse(p.memory()));
                } else {
                    procs.sort_by(|a, b| b.cpu_usage().total_cmp(&a.cpu_usage()));
                }
                let top: Vec<Value> = procs
                    .into_iter()
                    .take(limit)
                    .map(|p| {
                        json!({
                            "pid": p.pid().as_u32(),
                            "name": p.name().to_string_lossy(),
                            "cpu_percent": finite(p.cpu_usage()),
                            "memory": p.memory(),
                        })
                    })
                    .collect();
                stats["processes"] = Value::Array(top);
            }
            Ok(ToolOutput::ok(stats))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::ctx;

    #[tokio::test]
    async fn stats_have_the_seed_fields_as_valid_numbers() {
        let tmp = tempfile::tempdir().unwrap();
        let tool = GetSystemStats::new(&BuiltinConfig::default());
        assert!(!tool.spec().requires_approval);
        let out = tool.call(json!({}), &ctx(tmp.path())).await.unwrap();
        let s = &out.content;
        let cpu = s["cpu_percent"].as_f64().unwrap();
        assert!(
            (0.0..=100.0 * s["cpu_count"].as_f64().unwrap()).contains(&cpu),
            "{cpu}"
        );
        let used = s["memory_used"].as_u64().unwrap();
        let total = s["memory_total"].as_u64().unwrap();
        assert!(total > 0 && used > 0 && used <= total, "{used} / {total}");
        let free = s["disk_free"].as_u64().unwrap();
        assert!(free > 0 && free <= s["disk_total"].as_u64().unwrap());
        assert!(s.get("processes").is_none());
    }

    #[tokio::test]
    async fn processes_are_listed_on_request_sorted_and_limited() {
        let tmp = tempfile::tempdir().unwrap();
        let tool = GetSystemStats::new(&BuiltinConfig::default());
        let out = tool
            .call(
                json!({"include_processes": true, "process_limit": 3, "sort_by": "memory"}),
                &ctx(tmp.path()),
            )
            .await
            .unwrap();
        let procs = out.content["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 3);
        let mem: Vec<u64> = procs
            .iter()
            .map(|p| p["memory"].as_u64().unwrap())
            .collect();
        assert!(mem.windows(2).all(|w| w[0] >= w[1]), "{mem:?}");
        assert!(
            procs
                .iter()
                .all(|p| p["pid"].as_u64().is_some() && p["name"].is_string())
        );
        let err = tool
            .call(json!({"sort_by": "disk"}), &ctx(tmp.path()))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments { .. }));
    }
}
