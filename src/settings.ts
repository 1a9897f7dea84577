/**
 * The settings the CLI, the worker helper and standalone mode share: flags,
 * environment variables and parsers, free of yargs so the worker stays light.
 * A cluster worker gets the `WorkerSettings` in its environment at fork, the
 * `Timeline` in the drain message.
 */
import {parseDuration} from './duration.js';
import {UsageError} from './errors.js';
import {checkTimeline, DEFAULT_TIMELINE, type Timeline} from './timeline.js';

export interface WorkerSettings {
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
	 * (AWS: https://docs.aws.amazon.com/elasticloadbalancing/latest/application/application-load-balancers.html#connection-idle-timeout).
	 * 0 leaves the server's own value. @default 65000
	 */
	readonly keepAliveTimeoutMs: number;
	/** Each readiness check (attach()'s `readinessChecks`) fails after this long. @default 2000 */
	readonly checkTimeoutMs: number;
	/**
	 * A kept-alive connection older than this (give or take 10 %) is closed
	 * after its next response; an HTTP/2 session gets a graceful GOAWAY. 0: off.
	 * gRPC's MAX_CONNECTION_AGE (https://github.com/grpc/proposal/blob/master/A9-server-side-conn-mgt.md). @default 0
	 */
	readonly maxConnectionAgeMs: number;
	/** New requests are answered 503 while the event loop lags more than this. 0: off. @default 0 */
	readonly maxEventLoopDelayMs: number;
}

/** Everything a drain needs: what standalone mode reads from its environment. */
export type DrainSettings = Timeline & WorkerSettings;

export const DEFAULT_WORKER_SETTINGS: WorkerSettings = {
	retryAfterSeconds: 1,
	readinessPath: '/readyz',
	livenessPath: '/livez',
	keepAliveTimeoutMs: 65_000,
	checkTimeoutMs: 2000,
	maxConnectionAgeMs: 0,
	maxEventLoopDelayMs: 0,
};

export const DEFAULT_SETTINGS: DrainSettings = {...DEFAULT_TIMELINE, ...DEFAULT_WORKER_SETTINGS};

/** `--log-level`'s default; also the worker helper's and standalone mode's without `GRACEFUL_CLUSTER_LOG_LEVEL`. */
export const DEFAULT_LOG_LEVEL = 'info';

/** Each setting's long flag; the environment variable is `GRACEFUL_CLUSTER_` + its upper snake case. */
export const SETTING_FLAGS = {
	servePeriodMs: 'serve-period',
	rejectPeriodMs: 'reject-period',
	gracePeriodMs: 'grace-period',
	retryAfterSeconds: 'retry-after',
	readinessPath: 'readiness-path',
	livenessPath: 'liveness-path',
	keepAliveTimeoutMs: 'keep-alive-timeout',
	checkTimeoutMs: 'check-timeout',
	maxConnectionAgeMs: 'max-connection-age',
	maxEventLoopDelayMs: 'max-event-loop-delay',
} as const satisfies Record<keyof DrainSettings, string>;

export const envName = (flag: string): string => `GRACEFUL_CLUSTER_${flag.toUpperCase().replaceAll('-', '_')}`;

const describe = (flag: string): string => `--${flag} (${envName(flag)})`;

/** Node's timers hold at most 2^31-1 ms (about 24.8 days); a longer one fires after 1 ms. */
const MAX_TIMER_MS = 2_147_483_647;

export function parseDurationSetting(flag: string, text: string): number {
	const ms = parseDuration(text);
	if (ms === undefined) {
		const negative = /^\s*-/.test(text) ? ' A duration cannot be negative.' : '';
		throw new UsageError(`${describe(flag)}: "${text}" is not a duration.${negative} Write it as 500ms, 20s, 2m or a number of seconds.`);
	}

	if (ms > MAX_TIMER_MS) {
		throw new UsageError(`${describe(flag)}: "${text}" is longer than 24 days, the longest timer Node.js keeps. Use a shorter duration.`);
	}

	return ms;
}

export function parsePositiveDuration(flag: string, text: string): number {
	const ms = parseDurationSetting(flag, text);
	if (ms === 0) {
		throw new UsageError(`${describe(flag)}: "${text}" would fail every check at once. Give it a duration above 0, such as 2s.`);
	}

	return ms;
}

/** Shorter, every connection would close after a request or two, and each HTTP/2 close may refuse a stream. */
export const MIN_CONNECTION_AGE_MS = 1000;
/** A timer comes a few ms late at rest: a lower limit would shed on that. */
export const MIN_EVENT_LOOP_DELAY_MS = 10;

function parseAtLeast(least: number, why: string) {
	return (flag: string, text: string): number => {
		const ms = parseDurationSetting(flag, text);
		if (ms !== 0 && ms < least) {
			throw new UsageError(`${describe(flag)}: "${text}" is shorter than ${least}ms: ${why}. Use ${least}ms or more, or 0 to turn it off.`);
		}

		return ms;
	};
}

const parseConnectionAge = parseAtLeast(MIN_CONNECTION_AGE_MS, 'every connection would close after a request or two, and over HTTP/2 each close may refuse a stream (minutes are usual, as for gRPC\'s MAX_CONNECTION_AGE)');
const parseEventLoopDelay = parseAtLeast(MIN_EVENT_LOOP_DELAY_MS, 'a timer comes a few ms late at rest, so a worker would shed while idle');

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

/** The same path for both probes answers 503 from the drain's start: the orchestrator would restart the process mid-drain. */
export function checkProbePaths(settings: Pick<WorkerSettings, 'readinessPath' | 'livenessPath'>): void {
	const {readinessPath, livenessPath} = settings;
	if (readinessPath !== '' && readinessPath === livenessPath) {
		throw new UsageError(
			`${describe(SETTING_FLAGS.readinessPath)} and ${describe(SETTING_FLAGS.livenessPath)} are both "${readinessPath}": `
			+ 'that path answers 503 from the first moment of a drain, so the liveness probe would fail and the process be restarted mid-drain. '
			+ `Give them different paths (e.g. --readiness-path /readyz --liveness-path /livez), or '' to turn one off.`,
		);
	}
}

/** Where a setting's text comes from, by its flag: a variable or a parsed command line. `undefined`: the default. */
export type SettingSource = (flag: string) => string | undefined;

type Env = Record<string, string | undefined>;

const fromEnv = (env: Env): SettingSource => flag => env[envName(flag)];

function reader(source: SettingSource) {
	return <T>(key: keyof DrainSettings, parse: (flag: string, text: string) => T): T => {
		const flag = SETTING_FLAGS[key];
		const text = source(flag);
		return text === undefined ? (DEFAULT_SETTINGS[key] as T) : parse(flag, text);
	};
}

export function readWorkerSettings(source: SettingSource): WorkerSettings {
	const read = reader(source);
	const settings: WorkerSettings = {
		retryAfterSeconds: read('retryAfterSeconds', parseRetryAfter),
		readinessPath: read('readinessPath', parsePath),
		livenessPath: read('livenessPath', parsePath),
		keepAliveTimeoutMs: read('keepAliveTimeoutMs', parseDurationSetting),
		checkTimeoutMs: read('checkTimeoutMs', parsePositiveDuration),
		maxConnectionAgeMs: read('maxConnectionAgeMs', parseConnectionAge),
		maxEventLoopDelayMs: read('maxEventLoopDelayMs', parseEventLoopDelay),
	};
	checkProbePaths(settings);
	return settings;
}

export function readSettings(source: SettingSource, name?: (flag: string) => string): DrainSettings {
	const read = reader(source);
	const timeline: Timeline = {
		servePeriodMs: read('servePeriodMs', parseDurationSetting),
		rejectPeriodMs: read('rejectPeriodMs', parseDurationSetting),
		gracePeriodMs: read('gracePeriodMs', parseDurationSetting),
	};
	checkTimeline(timeline, name);
	return {...timeline, ...readWorkerSettings(source)};
}

export const workerSettingsFromEnv = (env: Env): WorkerSettings => readWorkerSettings(fromEnv(env));

export const settingsFromEnv = (env: Env): DrainSettings => readSettings(fromEnv(env), envName);

/** The environment the primary gives its workers, so both sides agree whatever the source was. */
export function workerSettingsToEnv(settings: WorkerSettings): Record<string, string> {
	return {
		[envName(SETTING_FLAGS.retryAfterSeconds)]: String(settings.retryAfterSeconds),
		[envName(SETTING_FLAGS.readinessPath)]: settings.readinessPath,
		[envName(SETTING_FLAGS.livenessPath)]: settings.livenessPath,
		[envName(SETTING_FLAGS.keepAliveTimeoutMs)]: `${settings.keepAliveTimeoutMs}ms`,
		[envName(SETTING_FLAGS.checkTimeoutMs)]: `${settings.checkTimeoutMs}ms`,
		[envName(SETTING_FLAGS.maxConnectionAgeMs)]: `${settings.maxConnectionAgeMs}ms`,
		[envName(SETTING_FLAGS.maxEventLoopDelayMs)]: `${settings.maxEventLoopDelayMs}ms`,
	};
}
