/**
 * Steady keep-alive load for the zero-downtime tests (reload, recycling): a
 * few clients in a loop on kept-alive connections, every outcome recorded.
 */
import {EventEmitter} from 'node:events';
import http from 'node:http';
import got from 'got';
import {pEvent} from 'p-event';
import {url} from '../../testkit/net.js';

/** One request's outcome: its answer (with how long it took from its send), or the client's error code. */
export type LoadOutcome = {status: number; pid: number; connection: string | undefined; retryAfter: string | undefined; ms: number} | {error: string};

export interface Load {
	stop(): Promise<void>;
	readonly results: LoadOutcome[];
	/** Resolves once `n` more requests have completed. */
	more(n: number): Promise<void>;
}

/**
 * Keep-alive clients in a loop, bounded in count and time; every outcome recorded. `post`: each a POST with a
 * small body (a JSON API's); `path`: what they ask for, which answers with the worker's pid.
 */
export function steadyLoad(port: number, {clients = 8, maxMs = 30_000, maxRequests = 50_000, post = false, path = '/pid', timeoutMs = 10_000}: {clients?: number; maxMs?: number; maxRequests?: number; post?: boolean; path?: string; timeoutMs?: number} = {}): Load {
	const agent = new http.Agent({keepAlive: true, maxSockets: clients});
	const keepAliveClient = got.extend({retry: {limit: 0}, throwHttpErrors: false, agent: {http: agent}, timeout: {request: timeoutMs}});
	const results: Load['results'] = [];
	/** 'result' after each request. */
	const progress = new EventEmitter();
	let stopped = false;
	const until = Date.now() + maxMs;
	const loop = async () => {
		while (!stopped && Date.now() < until && results.length < maxRequests) {
			const started = performance.now();
			try {
				const response = await keepAliveClient(url(port, path), post ? {method: 'POST', json: {order: results.length}} : {});
				results.push({status: response.statusCode, pid: Number(response.body), connection: response.headers.connection, retryAfter: response.headers['retry-after'], ms: performance.now() - started});
			} catch (error) {
				results.push({error: (error as {code?: string}).code ?? String(error)});
			}

			progress.emit('result');
		}
	};

	const loops = Array.from({length: clients}, async () => loop());
	return {
		results,
		async stop() {
			stopped = true;
			await Promise.all(loops);
			agent.destroy();
		},
		async more(n) {
			// Bounded: if the load stopped (its own caps) this fails instead of hanging.
			const at = results.length + n;
			await pEvent(progress, 'result', {filter: () => results.length >= at, timeout: 20_000}).catch((error: unknown) => {
				throw new Error(`the load did not complete ${n} more requests within 20 s (${results.length} so far)`, {cause: error});
			});
		},
	};
}
