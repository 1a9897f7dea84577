/**
 * The drain settings shared by the primary (from flags and environment) and the
 * worker helper (from the environment the primary hands it, or the developer's own
 * environment in standalone mode). Kept free of yargs so the worker stays light.
 */
import {formatDuration, parseDuration} from './duration.js';
import {UsageError} from './errors.js';

export interface DrainSettings {
	/** After the signal, keep serving new requests (with `Connection: close`) this long. @default 0 */
	readonly servePeriodMs: number;
	/** Then answer new requests 503 for this long while load balancers notice. @default 20000 */
	readonly rejectPeriodMs: number;
	/** Hard deadline from the signal: whatever still runs is killed. @default 90000 */
	readonly gracePeriodMs: number;
	/** Seconds sent in `Retry-After` on a drain 503. @default 1 */
	readonly retryAfterSeconds: number;
	/** Answered 200 while serving, 503 from the first moment of a drain. `''` disables. @default '/readyz' */
	readonly readinessPath: string;
	/** Answered 200 until the process exits. `''` disables. @default '/livez' */
	readonly livenessPath: string;
	/**
	 * Applied to each attached server's `keepAliveTimeout` (`headersTimeout` kept
	 * above it). Node's 5 s default is shorter than an ALB's 60 s idle timeout,
	 * which makes the ALB reuse connections Node is closing: 502s in steady state
	 * (RESEARCH.md fact 6). 0 leaves the server's own value. @default 65000
	 */
	readonly keepAliveTimeoutMs: number;
}

// 20 s of rejection inside a 90 s budget: Linkerd's proxy waits 90 s, Kubernetes
// gives 120 s (RESEARCH.md section 5).
export const DEFAULT_SETTINGS: DrainSettings = {
	servePeriodMs: 0,
	rejectPeriodMs: 20_000,
	gracePeriodMs: 90_000,
	retryAfterSeconds: 1,
	readinessPath: '/readyz',
	livenessPath: '/livez',
	keepAliveTimeoutMs: 65_000,
};

/** Each setting's long flag; the environment variable is `GRACEFUL_CLUSTER_` + its upper snake case. */
export const SETTING_FLAGS = {
	servePeriodMs: 'serve-period',
	rejectPeriodMs: 'reject-period',
	gracePeriodMs: 'grace-period',
	retryAfterSeconds: 'retry-after',
	readinessPath: 'readiness-path',
	livenessPath: 'liveness-path',
	keepAliveTimeoutMs: 'keep-alive-timeout',
} as const satisfies Record<keyof DrainSettings, string>;

export const envName = (flag: string): string => `GRACEFUL_CLUSTER_${flag.toUpperCase().replaceAll('-', '_')}`;

const describe = (flag: string): string => `--${flag} (${envName(flag)})`;

/** Node's timers hold at most 2^31-1 ms (about 24.8 days); a longer one fires after 1 ms. */
const MAX_TIMER_MS = 2_147_483_647;

export function parseDurationSetting(flag: string, text: string): number {
	const ms = parseDuration(text);
	if (ms === undefined) {
		throw new UsageError(`${describe(flag)}: "${text}" is not a duration. Write it as 500ms, 20s, 2m or a number of seconds.`);
	}

	if (ms > MAX_TIMER_MS) {
		throw new UsageError(`${describe(flag)}: "${text}" is longer than 24 days, the longest timer Node.js keeps. Use a shorter duration.`);
	}

	return ms;
}

export function parseRetryAfter(flag: string, text: string): number {
	if (!/^\d+$/.test(text.trim())) {
		throw new UsageError(`${describe(flag)}: "${text}" is not a whole number of seconds. Write it as 1, 5 or 30.`);
	}

	return Number(text);
}

export function parsePath(flag: string, text: string): string {
	if (text !== '' && !/^\/[^\s?#]*$/.test(text)) {
		throw new UsageError(`${describe(flag)}: "${text}" is not a request path. Write it as /readyz, or '' to turn the probe off.`);
	}

	return text;
}

/** Rejects timelines that cannot work: the deadline must leave time after the reject phase. */
export function checkTimeline(settings: DrainSettings): void {
	const {servePeriodMs, rejectPeriodMs, gracePeriodMs} = settings;
	if (servePeriodMs + rejectPeriodMs >= gracePeriodMs) {
		throw new UsageError(
			`--serve-period (${formatDuration(servePeriodMs)}) + --reject-period (${formatDuration(rejectPeriodMs)}) must be less than --grace-period (${formatDuration(gracePeriodMs)}), `
			+ 'or in-flight requests get no time to finish. Raise --grace-period or shorten the other two.',
		);
	}
}

type Env = Record<string, string | undefined>;

/**
 * Reads `GRACEFUL_CLUSTER_*` (worker helper, standalone mode and cluster workers).
 * Throws a `UsageError` naming the variable when one is malformed.
 */
export function settingsFromEnv(env: Env): DrainSettings {
	const read = <T>(key: keyof DrainSettings, parse: (flag: string, text: string) => T): T => {
		const flag = SETTING_FLAGS[key];
		const text = env[envName(flag)];
		return text === undefined ? (DEFAULT_SETTINGS[key] as T) : parse(flag, text);
	};

	const settings: DrainSettings = {
		servePeriodMs: read('servePeriodMs', parseDurationSetting),
		rejectPeriodMs: read('rejectPeriodMs', parseDurationSetting),
		gracePeriodMs: read('gracePeriodMs', parseDurationSetting),
		retryAfterSeconds: read('retryAfterSeconds', parseRetryAfter),
		readinessPath: read('readinessPath', parsePath),
		livenessPath: read('livenessPath', parsePath),
		keepAliveTimeoutMs: read('keepAliveTimeoutMs', parseDurationSetting),
	};
	checkTimeline(settings);
	return settings;
}

/** The environment the primary gives its workers, so both sides agree whatever the source was. */
export function settingsToEnv(settings: DrainSettings): Record<string, string> {
	return {
		[envName(SETTING_FLAGS.servePeriodMs)]: `${settings.servePeriodMs}ms`,
		[envName(SETTING_FLAGS.rejectPeriodMs)]: `${settings.rejectPeriodMs}ms`,
		[envName(SETTING_FLAGS.gracePeriodMs)]: `${settings.gracePeriodMs}ms`,
		[envName(SETTING_FLAGS.retryAfterSeconds)]: String(settings.retryAfterSeconds),
		[envName(SETTING_FLAGS.readinessPath)]: settings.readinessPath,
		[envName(SETTING_FLAGS.livenessPath)]: settings.livenessPath,
		[envName(SETTING_FLAGS.keepAliveTimeoutMs)]: `${settings.keepAliveTimeoutMs}ms`,
	};
}
