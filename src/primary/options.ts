/** What the primary is started with: the CLI's options once parsed, or a unit test's. */
import {DEFAULT_LOG_LEVEL, DEFAULT_SETTINGS, type DrainSettings} from '../settings.js';

export interface PrimaryOptions {
	/**
	 * Absolute path of the app's entry script, as given: through a release
	 * symlink, not resolved, so each fork follows the link as it is then.
	 */
	readonly script: string;
	readonly args: readonly string[];
	/**
	 * The directory workers start in, as given through a symlink; undefined:
	 * the primary's own, inherited (working-directory.ts).
	 */
	readonly cwd?: string | undefined;
	readonly workers: number;
	readonly settings: DrainSettings;
	readonly logLevel: string;
	readonly listenTimeoutMs: number;
	readonly maxStartFailures: number;
	readonly restartDelayMs: number;
	readonly maxRestartDelayMs: number;
	readonly backoffResetMs: number;
	/** Extra node flags for the workers (the primary's own `execArgv` come first). */
	readonly execArgv?: readonly string[];
	readonly workerTimeoutMs: number;
	readonly hungStack: boolean;
	readonly adaptiveReject: boolean;
	readonly autoAttach: boolean;
	readonly maxMemoryBytes: number;
	readonly maxRequests: number;
	readonly maxRequestsJitter: number;
	/** Off when undefined. */
	readonly metrics?: MetricsAddress | undefined;
}

/** Every option's default, written once, for the CLI's options table and the tests. */
export const DEFAULT_PRIMARY_OPTIONS: Omit<PrimaryOptions, 'script' | 'args' | 'workers' | 'execArgv' | 'metrics'> = {
	settings: DEFAULT_SETTINGS,
	logLevel: DEFAULT_LOG_LEVEL,
	listenTimeoutMs: 30_000,
	maxStartFailures: 5,
	restartDelayMs: 100,
	maxRestartDelayMs: 15_000,
	backoffResetMs: 30_000,
	workerTimeoutMs: 30_000,
	hungStack: false,
	adaptiveReject: false,
	autoAttach: true,
	maxMemoryBytes: 0,
	maxRequests: 0,
	maxRequestsJitter: 0,
};

export interface MetricsAddress {
	/** undefined: every interface. */
	readonly host: string | undefined;
	readonly port: number;
}
