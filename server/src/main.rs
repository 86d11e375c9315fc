//! `sluice`: the command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sluice::config::{redact_url, Settings};
use sluice::startup::{connect_and_migrate, shutdown_signal, Application};
use sluice::telemetry::init_tracing;
use sluice::tokens::{create_token, revoke_token, ApiScope};
use sluice_engine::clock::{Clock, SystemClock};

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
    /// Manage API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a token and print it once on stdout (only its hash is stored).
    Add {
        /// A unique name; it is the actor in the audit log.
        #[arg(long)]
        name: String,
        /// `worker` (permits, penalties, events, leases, reads) or `admin` (also limit writes).
        #[arg(long, value_parser = ["worker", "admin"])]
        scope: String,
    },
    /// Revoke a token by name.
    Revoke {
        #[arg(long)]
        name: String,
    },
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
            Command::Token(cmd) => token(&settings, cmd).await,
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

async fn token(settings: &Settings, cmd: TokenCommand) -> anyhow::Result<()> {
    let db = connect_and_migrate(settings).await?;
    let now = SystemClock.now();
    match cmd {
        TokenCommand::Add { name, scope } => {
            let scope: ApiScope = scope.parse()?;
            let (token, secret) = create_token(&db, &name, scope, now).await?;
            eprintln!("created {} token '{}' ({}); it is shown only once:", token.scope, token.name, token.id);
            println!("{}", secret.expose());
        }
        TokenCommand::Revoke { name } => {
            if !revoke_token(&db, &name, now).await? {
                anyhow::bail!("no live token named '{name}'");
            }
            eprintln!("revoked token '{name}'");
        }
    }
    db.close().await;
    Ok(())
}
