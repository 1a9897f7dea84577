/**
 * What the primary is started with: the CLI's options once parsed (args.ts),
 * or a unit test's. A room of its own below index.ts, because the rooms that
 * index.ts wires together read them too (status.ts, the metrics server).
 */
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
	/** A listening worker whose heartbeat is silent this long is killed as hung; 0 turns it off. */
	readonly workerTimeoutMs: number;
	/** Workers capture a blocked loop's JavaScript stack before the kill (a thread each: about 10 MB RSS). */
	readonly hungStack: boolean;
	/** `--adaptive-reject`: end the reject phase once the load balancers have stopped (primary/arrivals.ts). */
	readonly adaptiveReject: boolean;
	/** `--auto-attach`: every HTTP server a worker listens on is drained, attach() or not (worker/bootstrap.ts). */
	readonly autoAttach: boolean;
	/** Recycling by RSS and by requests served (recycle.ts); 0 turns each off. */
	readonly maxMemoryBytes: number;
	readonly maxRequests: number;
	readonly maxRequestsJitter: number;
	/** `--metrics`: where the primary serves `/metrics` and `/status`; off when undefined. */
	readonly metrics?: MetricsAddress | undefined;
}

/**
 * Every option's default, written once: the CLI's options table applies and
 * shows these (args.ts); tests build their options on them. What to run has
 * none, nor has `--workers` (worked out from the CPUs, cpu.ts); `--metrics` is
 * off unless given.
 */
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
