// A hand-written node:cluster primary: the baseline the graceful-cluster CLI is
// compared with, and the host the alternatives (terminus, http-terminator,
// lightship) run in. WORKERS workers (default 2) run hello.mjs with the same env.
// It logs {msg: 'worker listening'} per worker, like the CLI.
import cluster from 'node:cluster';
import process from 'node:process';

const workers = Number(process.env.WORKERS ?? 2);
cluster.setupPrimary({exec: new URL('hello.mjs', import.meta.url).pathname, silent: true});
for (let i = 0; i < workers; i++) {
	const worker = cluster.fork();
	worker.on('listening', address => {
		process.stdout.write(`${JSON.stringify({msg: 'worker listening', port: address.port, time: Date.now()})}\n`);
	});
}

process.on('SIGTERM', () => {
	for (const worker of Object.values(cluster.workers)) {
		worker.process.kill('SIGTERM');
	}

	cluster.on('exit', () => {
		if (Object.keys(cluster.workers).length === 0) {
			process.exit(0);
		}
	});
});
