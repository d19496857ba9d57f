//! `commhal info [--json]`: every backend this binary can use — built-ins and plugins
//! from `COMMHAL_PLUGIN_PATH` — whether it is available here (and why not), its
//! transport kinds and its guarantees; plus plugins that failed to load, and what the
//! current selection (`COMMHAL_BACKENDS` / `COMMHAL_CONFIG`) resolves to.

use commhal_hal::registry::{Availability, BackendInfo, Catalog, Selection};

/// Options of `commhal info`.
#[derive(Debug, clap::Args)]
pub struct InfoArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Print every setting (environment variable and tuning key) instead: its values,
    /// default and meaning, and its value where the environment sets it.
    #[arg(long)]
    pub settings: bool,
}

/// Print every backend.
pub fn run(args: &InfoArgs, cli_backends: Option<&[String]>) -> Result<i32, String> {
    if args.settings {
        return settings(args.json);
    }
    let catalog = Catalog::discover().map_err(|e| e.to_string())?;
    let infos = catalog.infos();
    let errors: Vec<String> = catalog.errors().iter().map(|e| e.to_string()).collect();
    let selection = Selection::from_env(cli_backends)
        .map_err(|e| e.to_string())
        .and_then(|s| {
            let names = catalog.resolve(&s).map_err(|e| e.to_string())?;
            Ok((
                format!("{:?}", s.source),
                names
                    .iter()
                    .map(|e| e.name().to_string())
                    .collect::<Vec<_>>(),
            ))
        });

    if args.json {
        let v = serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "backends": infos,
            "plugin_errors": errors,
            "selection": match &selection {
                Ok((source, names)) => serde_json::json!({"source": source, "backends": names}),
                Err(e) => serde_json::json!({"error": e}),
            },
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
        return Ok(0);
    }

    println!("commhal {} — backends", env!("CARGO_PKG_VERSION"));
    println!();
    for info in &infos {
        print_backend(info);
    }
    if !errors.is_empty() {
        println!("plugins that failed to load:");
        for e in &errors {
            println!("  - {e}");
        }
        println!();
    }
    match selection {
        Ok((source, names)) => println!(
            "selection ({source}): {}",
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        ),
        Err(e) => println!("selection: error: {e}"),
    }
    Ok(0)
}

fn print_backend(info: &BackendInfo) {
    let status = match &info.availability {
        Availability::Available => "available".to_string(),
        Availability::Unavailable(why) => format!("unavailable: {why}"),
    };
    println!("{:<16} {status}", info.name);
    println!("    {}", info.description);
    println!("    kinds: {}   origin: {}", info.kinds, info.origin);
    let claims: Vec<String> = info
        .guarantees
        .claims()
        .into_iter()
        .map(|(name, claimed)| format!("{}{name}", if claimed { "+" } else { "-" }))
        .collect();
    println!("    guarantees: {}", claims.join(" "));
    let g = &info.guarantees;
    let max = if g.max_transfer == u64::MAX {
        "unlimited".to_string()
    } else {
        format!("{} bytes", g.max_transfer)
    };
    println!("    max transfer: {max}   fifo depth: {}", g.fifo_depth);
    println!();
}

/// `commhal info --settings`: the declared settings, and any set to a value they refuse.
fn settings(json: bool) -> Result<i32, String> {
    use commhal_hal::settings;
    let env = settings::process_env;
    if json {
        let rows: Vec<_> = settings::all()
            .map(|s| {
                serde_json::json!({
                    "variable": s.env,
                    "values": s.expected(),
                    "default": s.default,
                    "read_by": s.read_by,
                    "doc": s.doc,
                    "set": s.raw_in(&env),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
    } else {
        print!("{}", settings::render_text(&env));
    }
    // a value its declaration refuses is reported here too, so a deployment can check
    // its environment before starting a job
    let bad: Vec<String> = settings::all()
        .filter_map(|s| s.check_in(&env).err().map(|e| e.to_string()))
        .collect();
    for b in &bad {
        eprintln!("commhal info: {b}");
    }
    Ok(if bad.is_empty() { 0 } else { 2 })
}
