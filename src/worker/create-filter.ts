/** Puts the right adapter (HTTP/1.1 or HTTP/2) in front of a drained server, with the settings each needs. */
import type {Server} from 'node:http';
import type {Logger} from '../logger.js';
import type {WorkerSettings} from '../settings.js';
import {drainableKind, type DrainableServer, type FilterOptions, type ServerFilter} from './filter.js';
import {RequestFilter} from './http1-filter.js';
import {Http2Filter, type Http2AnyServer} from './http2-filter.js';
import type {NoticeCode} from '../protocol.js';
import type {Arrivals} from './arrivals.js';

export interface FilterWiring {
	readonly logger: Logger;
	readonly onIdle: () => void;
	readonly lingerMs: () => number;
	readonly arrivals: Arrivals;
	readonly onNotice?: ((code: NoticeCode) => void) | undefined;
	readonly everyWorkerSheds?: (() => boolean) | undefined;
}

export function createFilter(server: DrainableServer, settings: WorkerSettings, {logger, onIdle, lingerMs, arrivals, onNotice, everyWorkerSheds}: FilterWiring): ServerFilter {
	const options: FilterOptions = {
		retryAfterSeconds: settings.retryAfterSeconds,
		readinessPath: settings.readinessPath,
		livenessPath: settings.livenessPath,
		// Only made when debug is on: at info, a rejected request costs no log call.
		onReject: logger.isLevelEnabled('debug')
			? request => {
				logger.debug(request, 'request rejected');
			}
			: undefined,
		onIdle,
		onLateListen(address) {
			logger.info({address}, 'a server began to listen after this worker had stopped listening (it was still starting at the drain); closing it');
		},
		lingerMs,
		arrivals,
		onNotice,
		maxConnectionAgeMs: settings.maxConnectionAgeMs,
		everyWorkerSheds,
	};
	// HTTP/2 ends connections with GOAWAY, not `Connection: close`.
	if (drainableKind(server) === 'http2') {
		return new Http2Filter(server as Http2AnyServer, options);
	}

	// Only HTTP/1.1 has keep-alive timeouts to tune.
	return new RequestFilter(server as Server, {...options, keepAliveTimeoutMs: settings.keepAliveTimeoutMs});
}
