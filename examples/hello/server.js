// A plain node:http app, run by graceful-cluster:
//   npx graceful-cluster --workers 2 examples/hello/server.js
// Then: curl localhost:3000/  (Ctrl-C or kill -TERM <primary pid> to watch it drain)
//
// No line of it knows graceful-cluster: its server is drained as it listens, and
// its own SIGTERM listener below runs once every request has finished.
import http from 'node:http';

const port = Number(process.env.PORT ?? 3000);

const server = http.createServer((request, response) => {
	const url = new URL(request.url ?? '/', 'http://localhost');
	// /slow?ms=5000 answers after a while: start one, send SIGTERM, see it finish.
	const delay = Math.min(Number(url.searchParams.get('ms') ?? 0), 60_000);
	if (url.pathname === '/slow') {
		console.log(JSON.stringify({msg: 'example: slow request started', ms: delay, pid: process.pid}));
	}

	setTimeout(() => {
		response.end(`hello from pid ${process.pid}\n`);
	}, url.pathname === '/slow' ? delay : 0);
});

process.on('SIGTERM', () => {
	// Close database pools, flush queues, ... here: every request has finished.
	console.log(JSON.stringify({msg: 'example: shutdown hook ran', pid: process.pid}));
	server.close();
});

server.listen(port);
