/**
 * Readiness checks: `attach(server, {readinessChecks: {db: () => pool.query('select 1')}})`.
 *
 * While serving, the readiness probe runs every check at once, each bounded by
 * `--check-timeout`, and answers 200 when all pass, 503 naming each failing one
 * and why when any throws, rejects, returns `false` or times out. Probes that
 * arrive while a run is in progress share it: a kubelet and a load balancer
 * probing every second must not multiply the load on a database that is
 * already slow. During a drain the request filter answers 503 at once, without
 * running them. The liveness probe never runs them: a database outage must not
 * make every pod restart.
 *
 * It sits in front of the request filter's `emit` (installed after it), and
 * only on servers that have checks: the others pay nothing.
 */
import type {IncomingMessage, Server, ServerResponse} from 'node:http';
import {DRAINING_BODY, isPath, READY_BODY} from './request-filter.js';

/** Passes unless it throws, rejects, returns `false` or takes longer than `--check-timeout`. */
export type ReadinessCheck = () => unknown;
export type ReadinessChecks = Readonly<Record<string, ReadinessCheck>>;

export interface ReadinessResult {
	readonly ok: boolean;
	/** `name: why`, one per failing check, in the order given. */
	readonly failures: readonly string[];
}


async function runOne(name: string, check: ReadinessCheck, timeoutMs: number): Promise<string | undefined> {
	let timer: NodeJS.Timeout | undefined;
	const timedOut = new Promise<string>(resolve => {
		timer = setTimeout(() => {
			resolve(`${name}: timed out after ${timeoutMs} ms`);
		}, timeoutMs);
	});
	const ran = (async () => {
		try {
			const result = await check();
			return result === false ? `${name}: returned false` : undefined;
		} catch (error) {
			return `${name}: ${String(error)}`;
		}
	})();
	try {
		return await Promise.race([ran, timedOut]);
	} finally {
		clearTimeout(timer);
	}
}

export class Readiness {
	private running: Promise<ReadinessResult> | undefined;

	constructor(private readonly checks: ReadinessChecks, private readonly timeoutMs: number) {
		for (const [name, check] of Object.entries(checks)) {
			if (typeof check !== 'function') {
				throw new TypeError(`graceful-cluster: readinessChecks.${name} is not a function; give a function that throws, rejects or returns false when not ready.`);
			}
		}
	}

	/** Runs every check, or joins the run in progress. */
	async run(): Promise<ReadinessResult> {
		this.running ??= (async () => {
			try {
				const outcomes = await Promise.all(Object.entries(this.checks).map(async ([name, check]) => runOne(name, check, this.timeoutMs)));
				const failures = outcomes.filter((failure): failure is string => failure !== undefined);
				return {ok: failures.length === 0, failures};
			} finally {
				this.running = undefined;
			}
		})();
		return this.running;
	}
}

function answer(response: ServerResponse, status: number, body: Buffer, close: boolean): void {
	if (response.writableEnded || response.destroyed) {
		return;
	}

	response.writeHead(status, {
		'Content-Type': 'text/plain; charset=utf-8',
		'Content-Length': body.length,
		'Cache-Control': 'no-store',
		...(close ? {Connection: 'close'} : {}),
	});
	response.end(body);
}

/**
 * Puts the checks in front of `server`'s readiness path. `serving()` false (a
 * drain, a retire): the request goes on to the filter, which answers at once.
 */
export function installReadiness(server: Server, path: string, readiness: Readiness, serving: () => boolean): void {
	if (path === '') {
		return;
	}

	const next = server.emit;
	// eslint-disable-next-line func-names
	server.emit = function (this: Server, event: string | symbol, request?: unknown, response?: unknown): boolean {
		if (event === 'request' && serving() && isPath((request as IncomingMessage).url ?? '', path)) {
			void readiness.run().then(result => {
				if (!serving()) {
					// The drain began while the checks ran.
					answer(response as ServerResponse, 503, DRAINING_BODY, true);
				} else if (result.ok) {
					answer(response as ServerResponse, 200, READY_BODY, false);
				} else {
					answer(response as ServerResponse, 503, Buffer.from(`${result.failures.join('\n')}\n`), false);
				}
			});
			return true;
		}

		// eslint-disable-next-line prefer-rest-params
		return Reflect.apply(next, this, arguments) as boolean;
	} as Server['emit'];
}
