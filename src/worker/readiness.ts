/**
 * Readiness checks: `attach(server, {readinessChecks: {db: () => pool.query('select 1')}})`.
 *
 * Why a check failed goes to the worker's log (once per change), never to the
 * client: an error's text can carry a connection string. Probes that arrive while a
 * run is in progress share it: a kubelet and a load balancer probing every second
 * must not multiply the load on a database that is already slow. The liveness probe
 * never runs them: a database outage must not make every pod restart. Both filters
 * answer the readiness path from here, so an `allowHTTP1` server gives one answer
 * whatever the probe's protocol.
 */
import {withTimeout} from '../clock.js';

/** Passes unless it throws, rejects, returns `false` or takes longer than `--check-timeout`. */
export type ReadinessCheck = () => unknown;
export type ReadinessChecks = Readonly<Record<string, ReadinessCheck>>;

export interface ReadinessResult {
	readonly ok: boolean;
	/** `name: why`, for the log and the primary, never for a client. */
	readonly failures: readonly string[];
	/** What a probe's 503 says. */
	readonly failing: readonly string[];
}

interface CheckFailure {
	readonly name: string;
	readonly why: string;
}

async function runOne(name: string, check: ReadinessCheck, timeoutMs: number): Promise<CheckFailure | undefined> {
	const ran = (async () => {
		try {
			const result = await check();
			return result === false ? {name, why: 'returned false'} : undefined;
		} catch (error) {
			return {name, why: String(error)};
		}
	})();
	return withTimeout(ran, timeoutMs, () => ({name, why: `timed out after ${timeoutMs} ms`}));
}

/** The checks (`Readiness`), or a stand-in for them (warmup.ts). */
export interface ReadinessProbe {
	probe(): Promise<Buffer | undefined>;
}

export class Readiness implements ReadinessProbe {
	private running: Promise<ReadinessResult> | undefined;
	private logged = '';

	constructor(private readonly checks: ReadinessChecks, private readonly timeoutMs: number, private readonly log?: (failures: readonly string[]) => void) {
		for (const [name, check] of Object.entries(checks)) {
			if (typeof check !== 'function') {
				throw new TypeError(`graceful-cluster: readinessChecks.${name} is not a function; give a function that throws, rejects or returns false when not ready.`);
			}
		}
	}

	/** Undefined when every check passed, otherwise the 503's body, naming the failing checks only. */
	async probe(): Promise<Buffer | undefined> {
		const {ok, failing} = await this.run();
		return ok ? undefined : Buffer.from(`${failing.map(name => `${name}: not ready`).join('\n')}\n`);
	}

	async run(): Promise<ReadinessResult> {
		this.running ??= (async () => {
			try {
				const outcomes = await Promise.all(Object.entries(this.checks).map(async ([name, check]) => runOne(name, check, this.timeoutMs)));
				const failed = outcomes.filter((failure): failure is CheckFailure => failure !== undefined);
				const failures = failed.map(({name, why}) => `${name}: ${why}`);
				const text = failures.join('\n');
				if (text !== this.logged) {
					this.logged = text;
					if (failures.length > 0) {
						this.log?.(failures);
					}
				}

				return {ok: failed.length === 0, failures, failing: failed.map(({name}) => name)};
			} finally {
				this.running = undefined;
			}
		})();
		return this.running;
	}
}
