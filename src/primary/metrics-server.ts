/**
 * `--metrics <[host:]port>`: the primary's HTTP endpoint. `GET /metrics` in the
 * Prometheus text format, `GET /status` as JSON. It listens before any worker
 * starts (an address that cannot be bound stops the start with exit 2) and
 * stays up until the primary exits, so the drain itself can be watched.
 */
import http from 'node:http';
import {UsageError} from '../errors.js';
import type {Logger} from '../logger.js';
import {ClusterMetrics} from './metrics.js';
import type {MetricsAddress} from './options.js';
import {clusterStatus, type ClusterView} from './status.js';

export const formatMetricsAddress = ({host, port}: MetricsAddress): string =>
	host === undefined ? String(port) : `${host.includes(':') ? `[${host}]` : host}:${port}`;

export async function serveMetrics(address: MetricsAddress, view: () => ClusterView, logger: Logger): Promise<http.Server> {
	const metrics = new ClusterMetrics(view, logger);
	const server = http.createServer((request, response) => {
		const path = (request.url ?? '/').split('?')[0];
		if (request.method !== 'GET' && request.method !== 'HEAD') {
			response.writeHead(405, {allow: 'GET, HEAD', 'content-type': 'text/plain'}).end('method not allowed\n');
			return;
		}

		if (path === '/metrics') {
			metrics.scrape().then(text => {
				response.writeHead(200, {'content-type': metrics.registry.contentType}).end(text);
			}, (error: unknown) => {
				logger.error({err: error}, 'metrics scrape failed');
				response.writeHead(500, {'content-type': 'text/plain'}).end('scrape failed\n');
			});
			return;
		}

		if (path === '/status') {
			response.writeHead(200, {'content-type': 'application/json'}).end(`${JSON.stringify(clusterStatus(view(), metrics.restartsOf), null, 2)}\n`);
			return;
		}

		response.writeHead(404, {'content-type': 'text/plain'}).end('not found: GET /metrics or /status\n');
	});
	// The primary must not wait for a scraper's keep-alive connection to end before it exits.
	server.unref();
	await new Promise<void>((resolve, reject) => {
		server.once('error', (error: NodeJS.ErrnoException) => {
			const where = formatMetricsAddress(address);
			const reason = error.code === 'EADDRINUSE'
				? `port ${address.port} is already in use`
				: error.code === 'EADDRNOTAVAIL' || error.code === 'ENOTFOUND'
					? `${address.host ?? 'the host'} is not an address of this machine`
					: error.code === 'EACCES' ? `binding port ${address.port} needs privileges` : error.message;
			reject(new UsageError(`--metrics (GRACEFUL_CLUSTER_METRICS) ${where}: cannot listen: ${reason}. Choose another port, or leave --metrics out.`));
		});
		server.listen({port: address.port, ...(address.host === undefined ? {} : {host: address.host})}, resolve);
	});
	server.on('error', (error: Error) => {
		logger.error({err: error}, 'metrics server error');
	});
	const bound = server.address();
	logger.info({address: typeof bound === 'object' && bound ? `${bound.address}:${bound.port}` : String(bound), paths: ['/metrics', '/status']}, 'serving metrics');
	return server;
}
