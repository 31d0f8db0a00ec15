# Sets llama.context_length of a GGUF (uint32) in place: python3 patch.py FILE 32768
import struct, sys
path, value = sys.argv[1], int(sys.argv[2])
with open(path, 'r+b') as f:
    head = f.read(1 << 20)
    key = b'llama.context_length'
    at = head.index(struct.pack('<Q', len(key)) + key) + 8 + len(key)
    assert struct.unpack('<I', head[at:at + 4])[0] == 4, 'not a uint32'
    f.seek(at + 4); f.write(struct.pack('<I', value))
    print('context_length', struct.unpack('<I', head[at + 4:at + 8])[0], '->', value)
