// A hand-written node:cluster primary: on SIGTERM it disconnects every worker
// (which closes the worker's server and waits for its connections to end) and
// exits when all are gone.
import cluster from 'node:cluster';
import http from 'node:http';
import handler from './handler.cjs';

if (cluster.isPrimary) {
	for (let i = 0; i < 2; i++) {
		cluster.fork();
	}

	process.on('SIGTERM', () => {
		for (const worker of Object.values(cluster.workers)) {
			worker.disconnect();
		}

		cluster.on('exit', () => {
			if (Object.keys(cluster.workers).length === 0) {
				process.exit(0);
			}
		});
	});
} else {
	http.createServer(handler.handle).listen(handler.port, handler.host);
}
