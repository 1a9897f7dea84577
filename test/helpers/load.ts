/**
 * Steady keep-alive load for the zero-downtime tests (reload, recycling): a
 * few clients in a loop on kept-alive connections, every outcome recorded.
 */
import {EventEmitter} from 'node:events';
import http from 'node:http';
import got from 'got';
import {pEvent} from 'p-event';
import {url} from '../../testkit/net.js';

export interface Load {
	stop(): Promise<void>;
	readonly results: Array<{status: number; pid: number; connection: string | undefined} | {error: string}>;
	/** Resolves once `n` more requests have completed. */
	more(n: number): Promise<void>;
}

/** Keep-alive clients in a loop, bounded in count and time; every outcome recorded. `post`: each a POST with a small body (a JSON API's). */
export function steadyLoad(port: number, {clients = 8, maxMs = 30_000, maxRequests = 50_000, post = false}: {clients?: number; maxMs?: number; maxRequests?: number; post?: boolean} = {}): Load {
	const agent = new http.Agent({keepAlive: true, maxSockets: clients});
	const keepAliveClient = got.extend({retry: {limit: 0}, throwHttpErrors: false, agent: {http: agent}, timeout: {request: 10_000}});
	const results: Load['results'] = [];
	/** 'result' after each request. */
	const progress = new EventEmitter();
	let stopped = false;
	const until = Date.now() + maxMs;
	const loop = async () => {
		while (!stopped && Date.now() < until && results.length < maxRequests) {
			try {
				const response = await keepAliveClient(url(port, '/pid'), post ? {method: 'POST', json: {order: results.length}} : {});
				results.push({status: response.statusCode, pid: Number(response.body), connection: response.headers.connection});
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
