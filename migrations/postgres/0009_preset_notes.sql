-- The notes of the preset rules created at first start cited internal
-- source documents ("(seed 004)"); cite the vendors' documentation instead.
-- Only notes nobody has edited are changed.
UPDATE limit_rules SET note = REPLACE(note, '(seed 004)', '(VTEX developer docs: API rate limits)')
 WHERE id IN ('vtex_pricing_put', 'vtex_pricing_post', 'vtex_pricing_delete', 'vtex_orders')
   AND note LIKE '%(seed 004)';
UPDATE limit_rules SET note = 'Wildberries seller API feeds: 1 request per minute per account (Wildberries API docs, rate limits)'
 WHERE id = 'wb_feeds' AND note = 'WB-style per-account feeds: 1 request per minute (seed 000)';
