//! `sluice`: the command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sluice::config::{redact_url, Settings};
use sluice::startup::{connect_and_migrate, shutdown_signal, Application};
use sluice::telemetry::init_tracing;

#[derive(Parser)]
#[command(name = "sluice", version, about = "Shared API quotas and webhook deliveries, kept honest.")]
struct Cli {
    /// Settings file overriding the built-in defaults (also SLUICE_CONFIG).
    #[arg(long, global = true, env = "SLUICE_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the web application, the API and the workers (the default).
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Serve with a mock marketplace, simulated workers, mock merchants and
    /// an event generator, so every page shows live data.
    Demo,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = match Settings::load(cli.config.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice: {e}");
            return ExitCode::from(2);
        }
    };
    init_tracing(&settings.log, settings.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command.unwrap_or(Command::Serve) {
            Command::Serve => serve(settings).await,
            Command::Demo => sluice::demo::run(settings).await,
            Command::Migrate => {
                connect_and_migrate(&settings).await?;
                println!("migrations applied to {}", redact_url(&settings.database_url));
                Ok(())
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "sluice stopped");
            eprintln!("sluice: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(settings: Settings) -> anyhow::Result<()> {
    tracing::info!(settings = ?settings, "starting");
    let app = Application::build(settings).await?;
    println!("Sluice is running at http://{}", app.address());
    app.run_until_stopped(shutdown_signal()).await
}
