//! `sluice`: the command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sluice::config::{redact_url, Settings};
use sluice::startup::{connect_and_migrate, ensure_first_admin, shutdown_signal, Application};
use sluice::telemetry::init_tracing;
use sluice_engine::tokens::{create_token, revoke_token, ApiScope};
use sluice_engine::audit::{self, AuditAction, AuditEntry};
use sluice_engine::clock::{Clock, SystemClock};
use sluice_engine::users;

#[cfg(all(target_os = "linux", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read at its start: a background thread hands pages
/// freed for a second back to the system, so resident memory follows what
/// is held now, not the busiest hour; one arena behind the threads' caches,
/// so its bookkeeping after a peak is one arena's, not eight (docs/decisions.md).
#[cfg(all(target_os = "linux", not(target_env = "msvc")))]
#[allow(non_upper_case_globals, unsafe_code)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8; 70] = b"background_thread:true,narenas:1,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// jemalloc's own account of its memory, for `/metrics`
/// ([`sluice::telemetry::AllocatorStats`]).
#[cfg(all(target_os = "linux", not(target_env = "msvc")))]
fn jemalloc_stats() -> Option<sluice::telemetry::AllocatorStats> {
    use tikv_jemalloc_ctl::{epoch, stats};
    // The statistics are a snapshot taken when the epoch advances.
    epoch::advance().ok()?;
    Some(sluice::telemetry::AllocatorStats {
        allocated: stats::allocated::read().ok()? as u64,
        active: stats::active::read().ok()? as u64,
        metadata: stats::metadata::read().ok()? as u64,
        resident: stats::resident::read().ok()? as u64,
        retained: stats::retained::read().ok()? as u64,
    })
}

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
    /// Manage the people who sign in to the web application.
    #[command(subcommand)]
    User(UserCommand),
}

#[derive(Subcommand)]
enum UserCommand {
    /// Create a user. The password is read from stdin with --password-stdin;
    /// otherwise one is generated and printed once on stdout.
    Add {
        #[arg(long)]
        username: String,
        #[arg(long, value_parser = ["viewer", "support", "admin"])]
        role: String,
        /// Read the password from the first line of stdin.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Set a new password (from stdin with --password-stdin, else generated and printed).
    Passwd {
        #[arg(long)]
        username: String,
        #[arg(long)]
        password_stdin: bool,
    },
    /// Change a user's role.
    Role {
        #[arg(long)]
        username: String,
        #[arg(long, value_parser = ["viewer", "support", "admin"])]
        role: String,
    },
    /// Remove a user.
    Remove {
        #[arg(long)]
        username: String,
    },
    /// List users.
    List,
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
    #[cfg(all(target_os = "linux", not(target_env = "msvc")))]
    sluice::telemetry::set_allocator_stats(jemalloc_stats);
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
            Command::User(cmd) => user(&settings, cmd).await,
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
    if let Some((username, password)) = ensure_first_admin(&app.state().db, SystemClock.now()).await? {
        println!("First start: created the admin user '{username}' with password {password}");
        println!("(shown only this once; add people with `sluice user add` or on the Users page)");
    }
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

/// The password for `user add` / `user passwd`: stdin's first line, or a
/// generated one (then `Some` so it can be printed once).
fn password_input(from_stdin: bool) -> anyhow::Result<(String, bool)> {
    if from_stdin {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        Ok((line.trim_end_matches(['\r', '\n']).to_owned(), false))
    } else {
        Ok((users::generate_password(), true))
    }
}

async fn user(settings: &Settings, cmd: UserCommand) -> anyhow::Result<()> {
    let db = connect_and_migrate(settings).await?;
    let now = SystemClock.now();
    match cmd {
        UserCommand::Add { username, role, password_stdin } => {
            let role: users::Role = role.parse()?;
            let (password, generated) = password_input(password_stdin)?;
            let user = users::create_user(&db, &username, &password, role, now).await?;
            audit_user(&db, AuditAction::UserCreate, &user, None, Some(&user), now).await?;
            eprintln!("created {} user '{}'", user.role, user.username);
            if generated {
                eprintln!("password (shown only once):");
                println!("{password}");
            }
        }
        UserCommand::Passwd { username, password_stdin } => {
            let (password, generated) = password_input(password_stdin)?;
            let user = users::set_password(&db, &username, &password, None).await?;
            audit_user(&db, AuditAction::UserPassword, &user, None, None, now).await?;
            eprintln!("password of '{}' changed", user.username);
            if generated {
                println!("{password}");
            }
        }
        UserCommand::Role { username, role } => {
            let (before, after) = users::set_role(&db, &username, role.parse()?, None).await?;
            audit_user(&db, AuditAction::UserRole, &after, Some(&before), Some(&after), now).await?;
            eprintln!("'{}' is now {}", after.username, after.role);
        }
        UserCommand::Remove { username } => {
            let user = users::delete_user(&db, &username).await?;
            audit_user(&db, AuditAction::UserDelete, &user, Some(&user), None, now).await?;
            eprintln!("removed '{}'", user.username);
        }
        UserCommand::List => {
            for u in users::list_users(&db).await? {
                println!("{}\t{}", u.username, u.role);
            }
        }
    }
    db.close().await;
    Ok(())
}

async fn audit_user(
    db: &sluice_engine::db::Db,
    action: AuditAction,
    user: &users::User,
    before: Option<&users::User>,
    after: Option<&users::User>,
    now: sluice_engine::clock::Timestamp,
) -> anyhow::Result<()> {
    let entry = AuditEntry { actor: "cli", action, target: &user.id, before, after, reason: None };
    audit::record(db, entry, now).await?;
    Ok(())
}
