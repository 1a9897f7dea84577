// The hot-path benchmark's server (bench/hot-path.js): one hello-world app per
// protocol, with or without attach(), chosen by env:
//   BENCH_PROTO = http1 | h2c | ws   (ws: node:http + ws, an echo on every socket)
//   BENCH_WRAP  = none | attach
//   BENCH_WORKER = the helper's file (the bench gives the bundle the package runs)
//   PORT        = port to listen on (127.0.0.1 only; 0 for any)
//   BENCH_GC_SIGNAL = set (with node --expose-gc): a full garbage collection on
//                 SIGUSR2, then a {msg: 'collected'} line (bench/instructions.js)
// Prints one JSON line {msg: 'listening', port, pid} once it listens.
import http from 'node:http';
import http2 from 'node:http2';
import process from 'node:process';

const proto = process.env.BENCH_PROTO ?? 'http1';
const wrap = process.env.BENCH_WRAP ?? 'none';
const HELLO = Buffer.from('hello world');

const hello = (_request, response) => {
	response.writeHead(200, {'content-type': 'text/plain', 'content-length': HELLO.length});
	response.end(HELLO);
};

const server = proto === 'h2c' ? http2.createServer(hello) : http.createServer(hello);
if (proto === 'ws') {
	const {WebSocketServer} = await import('ws');
	const wss = new WebSocketServer({server, perMessageDeflate: false});
	wss.on('connection', socket => {
		socket.on('message', (data, isBinary) => socket.send(data, {binary: isBinary}));
	});
}

if (wrap === 'attach') {
	const {attach} = await import(process.env.BENCH_WORKER);
	attach(server);
} else if (wrap !== 'none') {
	throw new Error(`unknown BENCH_WRAP ${wrap}`);
}

if (process.env.BENCH_GC_SIGNAL) {
	process.on('SIGUSR2', () => {
		globalThis.gc();
		process.stdout.write(`${JSON.stringify({msg: 'collected'})}\n`);
	});
}

server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
	process.stdout.write(`${JSON.stringify({msg: 'listening', port: server.address().port, pid: process.pid})}\n`);
});
