//! Every redb table of the store and the schema version, in one place. Keys are ids (strings)
//! or (id, sequence) tuples; values are versioned JSON records (`records.rs`) or raw bytes.

use redb::TableDefinition;

/// Bumped whenever a table or record changes incompatibly; checked at open.
pub const SCHEMA_VERSION: u64 = 1;

/// `schema_version` → u64 as 8 little-endian bytes, and other single values.
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// `prj_…` → `ProjectRecord`.
pub const PROJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("projects");
/// slug → `prj_…`.
pub const PROJECT_SLUGS: TableDefinition<&str, &str> = TableDefinition::new("project_slugs");
/// (`prj_…`, KEY) → sealed value (nonce ‖ ciphertext ‖ tag).
pub const ENV_VARS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("env_vars");
/// (`prj_…`, KEY) → `EnvScope`: where a variable applies; none means everywhere.
pub const ENV_VAR_SCOPES: TableDefinition<(&str, &str), &[u8]> =
    TableDefinition::new("env_var_scopes");
/// `tok_…` → `TokenRecord`.
pub const TOKENS: TableDefinition<&str, &[u8]> = TableDefinition::new("tokens");
/// SHA-256 of a token secret → `tok_…`.
pub const TOKEN_HASHES: TableDefinition<&[u8], &str> = TableDefinition::new("token_hashes");
/// `dpl_…` → `DeploymentRecord`.
pub const DEPLOYMENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("deployments");
/// `pvn_…` → `RunRecord`.
pub const RUNS: TableDefinition<&str, &[u8]> = TableDefinition::new("runs");
/// (`dpl_…`, seq) → `LogLine` JSON.
pub const LOGS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("logs");
/// `dpl_…` → `LogStats` (retained bytes, first and last seq).
pub const LOG_STATS: TableDefinition<&str, &[u8]> = TableDefinition::new("log_stats");
/// `src_…` → `SourceRecord`; the archive bytes live content-addressed in `<data_dir>/sources`.
pub const SOURCES: TableDefinition<&str, &[u8]> = TableDefinition::new("sources");
/// `dpl_…:web.1` (a deployment's instance; a bare `dpl_…` from before process types is its
/// `web.1`) → the running app's adoption handle (JSON written by the supervisor): what the
/// next daemon needs to take the app over instead of starting it again.
pub const APP_PROCESSES: TableDefinition<&str, &[u8]> = TableDefinition::new("app_processes");
/// `prj_…` → `StoredFormation`: the process types' settings the API set.
pub const FORMATIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("formations");
/// `run_…` → `JobRunRecord`: one-off and cron runs (issue 33; `RUNS` holds provisioning runs).
pub const JOB_RUNS: TableDefinition<&str, &[u8]> = TableDefinition::new("job_runs");
/// `crn_…` → `CronJobRecord`.
pub const CRON_JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("cron_jobs");
/// `adn_…` → `AddonRecord` (issue 34).
pub const ADDONS: TableDefinition<&str, &[u8]> = TableDefinition::new("addons");
/// `bak_…` → `AddonBackupRecord`: an add-on's backups and whether each was proven.
pub const ADDON_BACKUPS: TableDefinition<&str, &[u8]> = TableDefinition::new("addon_backups");
/// `adn_…` → `DeletedAddonRecord`: deleted add-ons whose backups are kept for a while.
pub const DELETED_ADDONS: TableDefinition<&str, &[u8]> = TableDefinition::new("deleted_addons");
/// `aud_<ms><random>` (chronological) → `AuditRecord`: one per API request that changes
/// something, written in the same transaction as the change.
pub const AUDIT: TableDefinition<&str, &[u8]> = TableDefinition::new("audit");
/// (token id, `Idempotency-Key`) → `IdempotentResponse`: the first answer, replayed for 24 h.
pub const IDEMPOTENCY: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("idempotency");
/// TLS state (CA, leaves, ACME account, orders, backoff), keyed by the tls module.
pub const TLS: TableDefinition<&str, &[u8]> = TableDefinition::new("tls");
/// A custom domain (lowercase, punycode) → `DomainRecord`; one project per name.
pub const DOMAINS: TableDefinition<&str, &[u8]> = TableDefinition::new("domains");
/// (project id, preview name) → `PreviewRecord`.
pub const PREVIEWS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("previews");
/// SHA-256 (hex) of a deploy hook's secret → `DeployHookRecord`.
pub const DEPLOY_HOOKS: TableDefinition<&str, &[u8]> = TableDefinition::new("deploy_hooks");
/// (project id, the provider's delivery id) → when it was received (Unix ms): redeliveries
/// of a webhook start nothing new. Kept 7 days.
pub const WEBHOOK_DELIVERIES: TableDefinition<(&str, &str), u64> =
    TableDefinition::new("webhook_deliveries");
/// (project id, branch) → `BranchHead`: the last push acted on for the branch and the heads
/// it superseded, so a replayed older push starts nothing.
pub const BRANCH_HEADS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("branch_heads");
/// `ntf_…` → `NotificationRecord` (webhook subscriptions; the secret sealed).
pub const NOTIFICATIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("notifications");
/// (due time in Unix ms, `dlv_…`) → `QueuedDelivery`: webhook deliveries still to be made,
/// the next due first.
pub const NOTIFICATION_QUEUE: TableDefinition<(u64, &str), &[u8]> =
    TableDefinition::new("notification_queue");
/// (`ntf_…`, seq) → `DeliveryAttempt`: the last 100 attempts of each subscription.
pub const NOTIFICATION_ATTEMPTS: TableDefinition<(&str, u64), &[u8]> =
    TableDefinition::new("notification_attempts");
/// (`prj_…` or `machine`, step (0 minute, 1 hour), start in Unix seconds) → a usage sample
/// (JSON the `usage::history` module owns): minutes kept a day, hours 30 days.
pub const USAGE_HISTORY: TableDefinition<(&str, u8, u64), &[u8]> =
    TableDefinition::new("usage_history");
