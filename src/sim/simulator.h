// placeholder header, written next
#pragma once
