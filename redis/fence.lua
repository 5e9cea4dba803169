local function less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local token, op = ARGV[1], ARGV[2]
if not string.match(token, '^[1-9][0-9]*$') then
  return redis.error_reply('ERR fencelock: token must be a positive decimal integer')
end
if op ~= 'check' and op ~= 'set' and op ~= 'hset' and op ~= 'del' then
  return redis.error_reply('ERR fencelock: unknown operation')
end
local highest = redis.call('GET', KEYS[1])
if highest and less(token, highest) then
  return {0, highest}
end
if op == 'set' then
  if ARGV[4] ~= '0' then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
  else
    redis.call('SET', KEYS[2], ARGV[3])
  end
elseif op == 'hset' then
  redis.call('HSET', KEYS[2], unpack(ARGV, 3))
elseif op == 'del' then
  redis.call('DEL', unpack(KEYS, 2))
end
if not highest or less(highest, token) then
  redis.call('SET', KEYS[1], token)
end
return {1, token}
